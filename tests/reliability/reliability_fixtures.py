"""The fixture every counting reliability module imports by name: ``write_tallies``, autouse
there, writes what the module counted (:mod:`tally`) at its teardown."""

from __future__ import annotations

import pytest
from tally import write_all


@pytest.fixture(scope="module", autouse=True)
def write_tallies():
    yield
    write_all()
