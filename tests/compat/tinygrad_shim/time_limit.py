"""Each test gets TEST_TIMEOUT seconds (default 60) of wall time, then fails with TimeoutError (SIGALRM)."""
import os, signal
import pytest


def _expired(signum, frame): raise TimeoutError(f"test ran past {os.environ.get('TEST_TIMEOUT', '60')} s")


@pytest.fixture(autouse=True)
def _time_limit():
  signal.signal(signal.SIGALRM, _expired)
  signal.alarm(int(os.environ.get('TEST_TIMEOUT', '60')))
  yield
  signal.alarm(0)
