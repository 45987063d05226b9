"""tests/nbval_sanitize.cfg removes what differs between a GPU run and the simulator, and no more."""

import configparser
import re
from pathlib import Path

CFG = Path(__file__).resolve().parent / "nbval_sanitize.cfg"


def sanitize(text: str) -> str:
    parser = configparser.ConfigParser()
    parser.read(CFG)
    for section in parser.sections():
        text = re.sub(parser[section]["regex"], parser[section]["replace"], text)
    return text


def test_the_harness_uses_the_file():
    import conftest

    assert conftest.SANITIZE == CFG and CFG.exists()


def test_case_lists_and_backend_configurations_compare_equal():
    pairs = [
        ("1 naive: correct for all 4 shapes (1x1x1, tile-1 x tile+1 x bk+1, non-multiples, aligned)\n",
         "1 naive: correct for all 5 shapes (1x1x1, tile-1 x tile+1 x bk+1, non-multiples, aligned, large)\n"),
        ("naive attention: correct for head_dim 16, not causal and causal, seq 9, 3 cases each\n",
         "naive attention: correct for head_dim 64, 128, not causal and causal, seq 131, 3 cases each\n"),
        ("E4M3 encode (saturating): 1932 inputs bit-exact (every tie, 600 float16 samples)\n",
         "E4M3 encode (saturating): 66868 inputs bit-exact (every tie, every float16)\n"),
        ("E4M3 saturating: 1024 of 1024 float16 inputs give ml_dtypes' code\n",
         "E4M3 saturating: 65536 of 65536 float16 inputs give ml_dtypes' code\n"),
        ("register blocked (2 ch x 2 px): correct for all 3 shapes (odd, tile+1, 1 pixel)\n",
         "register blocked (8 ch x 4 px): correct for all 4 shapes (large, odd, tile+1, 1 pixel)\n"),
        ("block 64x32x8, warp 64x16, thread 8x4 (2x1 of 4x4), 64 threads, float64\n",
         "block 64x64x8, warp 32x32, thread 4x8 (1x2 of 4x4), 128 threads, double-buffered, float64\n"),
    ]
    for simulator, gpu in pairs:
        assert sanitize(simulator) == sanitize(gpu), (simulator, gpu)


def test_verdicts_still_differ():
    right = "E4M3 saturating: 65536 of 65536 float16 inputs give ml_dtypes' code\n"
    wrong = "E4M3 saturating: 65000 of 65536 float16 inputs give ml_dtypes' code\n"
    assert sanitize(right) != sanitize(wrong)
    passed = "1 naive: correct for all 5 shapes (1x1x1, large)\n"
    failed = "CheckFailed: 1 naive (size large): 12 of 1024 elements are wrong\n"
    assert sanitize(passed) != sanitize(failed) and sanitize(failed) == failed
