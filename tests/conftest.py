from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data beside the checkout (tests skip when it is absent)."""
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} not found")
    return SHARED
