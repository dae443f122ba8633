"""`codechat chat`: talk to a model in the terminal and run its answers in the sandbox.

    codechat chat runs/x                          # a run directory: its final checkpoint, in its prompt format
    codechat chat runs/x --checkpoint best        # the checkpoint with the best eval greedy pass@1
    codechat chat tiny --temperature 0.2          # a preset or a Hugging Face model directory
    codechat chat runs/x --once "Write fizzbuzz"  # answer one question on stdout and exit

The session logic lives in codechat/chat/session.py; this module adds the terminal: readline editing and history
(`$CODECHAT_CACHE/chat_history`, default ~/.cache/codechat), streaming to stdout, Ctrl-C (stops the answer or
waiting for /run or /test, never the chat), Ctrl-D or /quit to leave. See docs/chat.md.
"""
from __future__ import annotations

import argparse
import atexit
import signal
import sys

from codechat import CodechatError
from codechat.chat.session import ChatSession
from codechat.commands import repo
from codechat.config import ModelConfig, SamplingConfig, VerifierConfig
from codechat.policy import load_policy
from codechat.policy.presets import cache_root
from codechat.policy.sampler import validate
from codechat.io.rundir import resolve_model, run_config, run_prompt_format, section


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL_OR_RUN_DIR", nargs="?",
                   help="model directory, preset name (tiny, small), or run directory (its final checkpoint; "
                        "RUN/final, RUN/best); optional with --repo-task (then you drive the tools)")
    p.add_argument("--checkpoint", default="final", choices=["final", "best"],
                   help="which checkpoint of a run directory: final (default) or best (eval greedy pass@1)")
    p.add_argument("--temperature", type=float, default=0.7, help="sampling temperature, 0 = greedy (default 0.7)")
    p.add_argument("--top-p", type=float, default=0.95, help="nucleus sampling mass (default 0.95)")
    p.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens, 0 = off (default 0)")
    p.add_argument("--max-new-tokens", type=int, default=512, help="answer length limit in tokens (default 512)")
    p.add_argument("--seed", type=int, default=0, help="seed of answer 0; answer i uses seed + i (default 0)")
    p.add_argument("--timeout", type=float, default=None, help="/run and /test time limit in seconds (default 5)")
    p.add_argument("--format", default="auto", choices=["auto", "chat", "plain", "raw"],
                   help="prompt format: the tokenizer's chat template (chat), User:/Assistant: text (plain), the "
                        "question continued as is (raw); auto (default): a run's own training format, else chat "
                        "when there is a template, else plain")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda[:N] (default auto)")
    p.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16 (default float32)")
    p.add_argument("--once", metavar="QUESTION", help="answer QUESTION on stdout and exit (no terminal needed)")
    p.add_argument("--repo-task", metavar="TASKS", help="a repository task set: drive its tools by hand, or with "
                                                        "MODEL watch one episode (docs/agent.md)")
    p.add_argument("--task-id", help="with --repo-task: which task (default: the first)")
    p.add_argument("--repos", help="with --repo-task: directory of SWE-bench checkouts")


def open_session(args: argparse.Namespace):
    """Load the model (clear one-line errors for missing or broken paths) and build the ChatSession."""
    sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                              max_new_tokens=args.max_new_tokens, seed=args.seed)
    validate(sampling)  # before the (slow) model load
    if args.timeout is not None and not args.timeout > 0:
        raise CodechatError(f"--timeout: expected a positive number of seconds, got {args.timeout}")
    vcfg = VerifierConfig(workers=1)
    if args.timeout:
        vcfg.timeout_s = args.timeout
    path = resolve_model(args.model, args.checkpoint)
    trained = run_prompt_format(path)  # raw / chat when the model comes from a codechat run, else None
    fmt = trained if args.format == "auto" and trained else args.format
    stop = section(run_config(path), "sampling").get("stop") or [] if trained else []
    try:
        policy = load_policy(ModelConfig(path=path, device=args.device, dtype=args.dtype))
    except CodechatError:
        raise
    except Exception as e:  # noqa: BLE001 - a broken checkpoint fails in many ways; name the path, not a traceback
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise CodechatError(f"{args.model}: cannot load the model ({type(e).__name__}: {first})") from None
    return ChatSession(policy, sampling, vcfg, prompt_format=fmt, model_name=args.model,
                       trained=bool(trained) and fmt == trained, stop=[str(x) for x in stop])


def stream_answer(session, question: str, out=sys.stdout) -> str:
    """Print the answer as it is generated; Ctrl-C stops it. Returns how it finished."""
    gen = session.ask(question)
    try:
        for piece in gen:
            out.write(piece)
            out.flush()
    except KeyboardInterrupt:
        gen.close()
        out.write("\n[stopped]\n")
        return "interrupted"
    finally:
        gen.close()
    turn = session.turns[-1]
    out.write("\n[max_new_tokens reached]\n" if turn.finish == "length" else "\n")
    return turn.finish


def setup_readline():
    """Line editing and a persistent history; returns the history path (None without readline)."""
    try:
        import readline
    except ImportError:  # e.g. some Windows Pythons: plain input() still works
        return None
    path = cache_root() / "chat_history"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        readline.read_history_file(path)
    except OSError:
        pass
    readline.set_history_length(2000)

    def save() -> None:
        try:
            readline.write_history_file(path)
        except OSError:
            pass
    atexit.register(save)
    return path


def read_more(prompt: str) -> str:
    """A continuation line (/test); Ctrl-D ends the paste like an empty line."""
    try:
        return input(prompt)
    except EOFError:
        print()
        return ""


def repl(session) -> int:
    setup_readline()
    fmt = {"chat": "chat template", "raw": "raw continuation, as trained"}.get(
        session.prompt_format, "plain User:/Assistant: prompts")
    if session.trained and session.prompt_format == "chat":
        fmt += ", as trained"
    print(f"codechat chat: {session.model_name} ({fmt}). /help lists commands; /quit or Ctrl-D leaves.")
    while not session.done:
        try:
            line = input("you> ").strip()
        except EOFError:
            print()
            break
        except KeyboardInterrupt:
            print("\n(Ctrl-C stops an answer; /quit or Ctrl-D leaves)")
            continue
        if not line:
            continue
        try:
            if line.startswith("/"):
                text = session.handle(line, read_line=read_more)
                if text:
                    print(text)
            else:
                print("model> ", end="", flush=True)
                stream_answer(session, line)
        except CodechatError as e:
            print(f"error: {e}")
        except KeyboardInterrupt:  # during /run or /test: the program still ends by its time limit
            print("\n[stopped]")
    return 0


def run(args: argparse.Namespace) -> int:
    # Ctrl-C stops an answer or a /run even when we were started with SIGINT ignored (a shell's background job, a
    # test runner's worker): Python installs its KeyboardInterrupt handler only over the default disposition
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if args.repo_task:  # a repository task: tools by hand, or one watched episode
        return repo.run_chat(args)
    if not args.model:
        raise CodechatError("chat needs MODEL_OR_RUN_DIR (or --repo-task to drive a repository task's tools)")
    chat = open_session(args)
    try:
        if args.once is not None:
            for piece in chat.ask(args.once):
                sys.stdout.write(piece)
                sys.stdout.flush()
            sys.stdout.write("\n")
            return 0
        return repl(chat)
    finally:
        chat.close()
