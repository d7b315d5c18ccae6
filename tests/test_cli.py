"""Every command-line input gets an answer: the sizes people type work, and anything else ends in one
line that says what is expected, with exit status 2 and no traceback. Refusals are checked in this process
(tests/_cli.py); what runs is run as a user would, in a subprocess."""

import os
import subprocess
import sys

import pytest

from gpukernels import LESSONS
from gpukernels.cli import UsageError, parse_size

from ._cli import run_main

ENV = dict(os.environ, GPUKERNELS_DEVICE="sim")


def gk(*args):
    return subprocess.run([sys.executable, "-m", "gpukernels", *args], capture_output=True, text=True, env=ENV,
                          timeout=300)


@pytest.mark.parametrize("text, lesson, shape", [
    ("32", "matmul", (32, 32, 32)), ("32,16,8", "matmul", (32, 16, 8)), ("32x16x8", "matmul", (32, 16, 8)),
    (" 32 X 16 x 8 ", "matmul", (32, 16, 8)), ("12", "softmax", (12, 12)), ("4x64", "softmax", (4, 64)),
    ("1,4,16,16,8,3,3", "cbr", (1, 4, 16, 16, 8, 3, 3)),
    ("1,2,40,70,16", "attention", (1, 2, 40, 70, 16)), ("1x2x40x70x16", "attention", (1, 2, 40, 70, 16)),
])
def test_sizes_as_people_type_them(text, lesson, shape):
    assert parse_size(text, lesson) == shape


@pytest.mark.parametrize("text, lesson, why", [
    ("32,32", "matmul", "has 2 number(s); matmul --size takes M,N,K"),
    ("a,b,c", "matmul", "is not a list of whole numbers; matmul --size takes M,N,K"),
    ("3.5x2", "softmax", "is not a list of whole numbers; softmax --size takes M,N"),
    ("0x4", "softmax", "every dimension must be at least 1"),
    ("4", "cbr", "has 1 number(s); cbr --size takes N,C,H,W,K,R,S"),
    ("40,70", "attention", "has 2 number(s); attention --size takes B,H,Sq,Sk,D (e.g. 1,1,40,70,16"),
    ("1,1,0,4,16", "attention", "every dimension must be at least 1"),
    ("", "matmul", "has 0 number(s)"),
    # every form parses whole or is refused: no number read out of a text that is not a list of them
    ("3,x", "matmul", "is not a list of whole numbers"), ("3x", "matmul", "is not a list of whole numbers"),
    ("x3", "softmax", "is not a list of whole numbers"), ("3,,3", "softmax", "is not a list of whole numbers"),
    ("4x4,", "softmax", "is not a list of whole numbers"), ("-1x4", "softmax", "is not a list of whole numbers"),
])
def test_sizes_that_cannot_be_used_say_the_expected_form(text, lesson, why):
    with pytest.raises(UsageError, match=why.replace("(", r"\(").replace(")", r"\)")):
        parse_size(text, lesson)


@pytest.mark.slow  # 4 CPU-s: traces in the simulator; the rule for a step's number is tested in-process
def test_trace_and_demo_take_a_single_number():
    for args in (("trace", "matmul", "--version", "naive", "--size", "8"), ("demo", "softmax", "--size", "4"),
                 ("trace", "attention", "--version", "mma", "--size", "1x1x8x20x16")):
        proc = gk(*args)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
    assert "shape (8, 8, 8)" in gk("trace", "matmul", "--version", "naive", "--size", "8x8x8").stdout


@pytest.mark.parametrize("args, expected", [
    (("trace", "matmul", "--size", "32,32"), "matmul --size takes M,N,K (e.g. 64,64,64 or 64x64x64)"),
    (("trace", "softmax", "--size", "many"), "softmax --size takes M,N"),
    (("demo", "matmul", "--size", "8x8xq"), "matmul --size takes M,N,K"),
    (("demo", "all", "--size", "8,8"), "with 'all', --size must fit every lesson"),
    (("trace", "matmul", "--version", "fastest"), "--version 'fastest': matmul has no such step; expected a matmul "
                                                  "step, 1-21 or one of naive, coalesced, tiled"),
    (("demo", "convolution"), f"unknown lesson 'convolution'; choose from {', '.join(LESSONS)} or all"),
    (("trace", "convolution"), "invalid choice: 'convolution' (choose from "
                               + ", ".join(repr(name) for name in sorted(LESSONS)) + ")"),
    (("trace", "matmul", "--json", "/no/such/folder/t.json"), "its folder does not exist"),
    # a shape the version's own check refuses: its reason, after the option and the size typed
    (("trace", "attention", "--version", "mma", "--size", "1,1,8,8,40"), "--size 1,1,8,8,40: attention"),
    (("trace", "attention", "--size", "1x1x8x8x200"), "--size 1x1x8x8x200: the head dimension D"),
    (("demo", "attention", "--size", "1,1,8,8,129"), "--size 1,1,8,8,129: the head dimension D"),
    (("trace", "cbr", "--size", "1,1,2,2,1,5,5"), "--size 1,1,2,2,1,5,5: the kernel (R, S) = (5, 5) is larger"),
    (("frobnicate",), "unknown command 'frobnicate'"),
])
def test_unusable_input_is_one_line_and_exit_status_2(args, expected, capfd):
    # capfd, not capsys: on a GPU `trace` runs the simulator in a child process, which writes to the descriptors
    code, out, err = run_main(capfd, args)
    assert code == 2, (out, err)
    assert "Traceback" not in err and expected in err
    assert sum(expected in line for line in err.splitlines()) == 1  # said once, on one line
