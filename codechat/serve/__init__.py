"""`codechat serve`: codechat's verifier over HTTP, for trainers that are not codechat's (TRL, verl, OpenRLHF).

    codechat serve --port 8080 --workers 2                      # localhost: no token needed
    codechat serve --host 0.0.0.0 --token "$TOKEN" --tasks T.jsonl

`server.py` runs it on uvicorn, `app.py` holds the routes and the operations (auth, limits, admission, shutdown),
`runcode.py` SandboxFusion's `/run_code` contract, `batch.py` the native `/verify` batch, `safejson.py` JSON in
and out (hostile bodies, unencodable output), `metrics.py` the counters, `config.py` ServeConfig. See docs/serve.md.
"""
