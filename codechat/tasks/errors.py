"""The error every task reader raises, in a module of its own so that the task model and the stdio spec can both
use it without importing each other."""
from codechat import CodechatError


class TaskFormatError(CodechatError):
    """A task file is unreadable or a record is malformed; the message names the file and line."""
