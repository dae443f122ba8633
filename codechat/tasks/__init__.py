"""Tasks: problems = prompt + tests. Loaders for our JSONL, MBPP, MBPP+/HumanEval+ and HumanEval; built-in sets."""
from codechat.tasks.loaders import FORMATS, detect_format, load_tasks_with_format, save_tasks
from codechat.tasks.model import Task, TaskFormatError
from codechat.tasks.sources import load_tasks

__all__ = ["FORMATS", "Task", "TaskFormatError", "detect_format", "load_tasks", "load_tasks_with_format",
           "save_tasks"]
