"""Retry an HTTP request with exponential backoff and jitter."""
import logging
import random
import time
import urllib.error
import urllib.request

log = logging.getLogger(__name__)

RETRYABLE_STATUS = {429, 500, 502, 503, 504}


def backoff_delays(base=0.5, factor=2.0, cap=30.0, attempts=5, rng=random.random):
    delay = base
    for _ in range(attempts):
        yield min(cap, delay) * (0.5 + rng())
        delay *= factor


def fetch(url, timeout=10.0, attempts=5):
    last_error = None
    for attempt, delay in enumerate(backoff_delays(attempts=attempts), start=1):
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            if exc.code not in RETRYABLE_STATUS:
                raise
            last_error = exc
        except urllib.error.URLError as exc:
            last_error = exc
        log.warning("attempt %d for %s failed (%s); retrying in %.1fs",
                    attempt, url, last_error, delay)
        time.sleep(delay)
    raise RuntimeError(f"giving up on {url} after {attempts} attempts") from last_error
