import os
from pathlib import Path

import pytest
from hypothesis import settings

from codechat import plugins
from codechat.tasks.repo_loaders import load_repo_tasks

# No per-example deadline for any fuzz test: on a loaded 2-core machine an example can take seconds, and a
# deadline failure there says nothing about the code. Tests' own @settings add to this profile.
settings.register_profile("codechat", deadline=None)
settings.load_profile("codechat")

SHARED = Path(os.environ.get("CODECHAT_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data beside the checkout, or $CODECHAT_SHARED_DATA (tests skip when it is absent)."""
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} not found")
    return SHARED


@pytest.fixture
def short_tasks(monkeypatch):
    """builtin:repo-train cut to 4 tasks with a 2-turn budget per episode (so a test takes seconds, not minutes)."""
    def load(spec, repos=None):
        tasks = load_repo_tasks(spec, repos)[:4]
        for t in tasks:
            t.limits.max_turns = 2
        return tasks
    monkeypatch.setattr(plugins, "load_repo_tasks", load)
