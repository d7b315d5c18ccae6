"""Python's own help works on the steps: ``help(matmul.tiled)`` shows the step (its docstring and the arguments it
really takes), not the registry class behind it; ``inspect`` sees the same; and an error names the step the user
called, not the steps a shared check was written for."""

import inspect
import pydoc
import sys

import numpy as np
import pytest

import gpukernels
from gpukernels import LESSONS, attention, cbr, matmul
from gpukernels._launch import LaunchError, Version


def test_a_step_has_its_real_signature():
    assert str(inspect.signature(matmul.tiled)) == "(a, b, *, out=None, stream=None)"
    assert str(inspect.signature(cbr.naive)) == "(x, w, b, padding=1, *, out=None, stream=None)"
    assert str(inspect.signature(attention.optimized)) == ("(q, k, v, causal=False, scale=None, *, out=None, "
                                                           "stream=None)")
    # what the signature says is what a call takes: keywords by name, out and stream by keyword only
    a, b = matmul.make_inputs((4, 5, 3), 0)
    np.testing.assert_allclose(matmul.tiled(a=a, b=b), matmul.reference(a, b), rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError, match=r"^matmul\.tiled\(\) too many positional arguments$"):
        matmul.tiled(a, b, np.empty((4, 5), np.float32))


def test_help_shows_the_step_not_the_registry_class():
    text = pydoc.render_doc(matmul.tiled, renderer=pydoc.plaintext)
    assert "tiled(a, b, *, out=None, stream=None)" in text
    assert "Step 3 of the matmul ladder" in text  # the step's own docstring
    assert "reused TILE times" in text
    assert "A registry entry" not in text and "class Version" not in text  # not the class's
    assert "gpukernels source matmul tiled" in text  # where its code is


@pytest.mark.parametrize("lesson", list(LESSONS))
def test_every_step_documents_itself(lesson):
    for name, version in LESSONS[lesson].VERSIONS.items():
        assert version.__name__ == name and version.__module__ == f"gpukernels.{lesson}"
        assert version.__doc__ != Version.__doc__ and f"Call: {lesson}.{name}(" in version.__doc__
        step = sys.modules[version.__wrapped__.__module__].__doc__  # the step's file: kNN_name.py
        assert version.__doc__.startswith(inspect.cleandoc(step).split("\n")[0])
        assert "def " + name in inspect.getsource(version)  # the launcher's code, through __wrapped__
        params = list(inspect.signature(version).parameters)
        assert params[-2:] == ["out", "stream"] and "args" not in params and "params" not in params
    # the one idea (the launcher's first paragraph) is unchanged: the tables and the README read it
    assert matmul.tiled.idea.startswith("Shared-memory tiling")


def test_help_of_a_lesson_lists_its_steps():
    text = pydoc.render_doc(gpukernels.softmax, renderer=pydoc.plaintext)
    for name in LESSONS["softmax"].VERSIONS:
        assert f"{name}(x, *, out=None, stream=None)" in text, name


def test_a_float32_k_beside_a_float16_q_names_the_step_called():
    q = np.ones((1, 1, 4, 16), np.float16)
    k = np.ones((1, 1, 4, 16), np.float32)
    with pytest.raises(LaunchError) as err:
        attention.optimized(q, k, k)
    message = str(err.value)
    assert "attention.optimized" in message and "got q float16, k float32, v float32" in message
    assert "attention.mma" not in message and "attention.pipelined" not in message
    for name, other in (("mma", "pipelined"), ("pipelined", "mma")):  # each names itself, not its sibling
        with pytest.raises(LaunchError, match=rf"float16 for attention\.{name} \(") as err:
            attention.VERSIONS[name](k, k, k)
        assert f"attention.{other}" not in str(err.value)
