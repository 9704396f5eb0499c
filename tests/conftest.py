"""Every test runs against a cache of the session's own: calibrations the tests measure (tiny
models, machines under test load) must not land in the user's cache, nor a stale one there
decide a test. The default model that `make setup` fetched is shared through a link."""
import pytest
import torch

from engine.user_cache import cache_root


@pytest.fixture(autouse=True, scope="session")
def _session_cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("cache")
    (root / "models").symlink_to(cache_root() / "models", target_is_directory=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SWARMSCOPE_CACHE", str(root))
        yield


@pytest.fixture
def restore_threads():
    """torch's CPU thread count is the process's: a test that sets it puts it back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
