"""tokenizer_service/heap.py: the collector paused for a block, and back as it was after."""

import gc

import pytest

from tokenizer_service.heap import collector_paused


def test_the_collector_is_back_on_after_a_block_that_raised():
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("the build failed")
    assert gc.isenabled()


def test_a_caller_that_had_the_collector_off_keeps_it_off():
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
