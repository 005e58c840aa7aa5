"""Shared set-up of the hixl pytest suites.

Multi-rank suites run as `hixlrun -n N python -m pytest -x ... test_x.py`:
every rank runs the same tests in the same order, so the collectives inside
them match.  Only rank 0 reports test by test; the others print their
progress dots and, on failure, the full report.  A rank whose test failed
skips finalize (the others may be inside a collective it will never join),
exits non-zero, and hixlrun then stops every rank.
"""

import os
import types

import pytest

RANK = int(os.environ.get("RANK", "0"))
WORLD_SIZE = int(os.environ.get("WORLD_SIZE", "1"))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if RANK != 0:
        config.option.verbose = min(config.option.verbose, -1)


def pytest_report_header(config):
    return f"hixl rank {RANK} of {WORLD_SIZE}"


@pytest.fixture(scope="session")
def world(request):
    """The world, joined once per pytest session: rank, size and two peers
    (next and previous rank, the rank itself in a world of one)."""
    import hixl

    if not hixl.is_initialized():
        hixl.init()
    rank, size = hixl.rank(), hixl.world_size()
    yield types.SimpleNamespace(rank=rank, size=size, next=(rank + 1) % size, prev=(rank - 1) % size)
    if request.session.testsfailed and size > 1:
        print(f"\nrank {rank}: a test failed: leaving without hixl.finalize()", flush=True)
        return
    if hixl.is_initialized():
        hixl.finalize()
