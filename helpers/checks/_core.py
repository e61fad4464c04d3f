"""The machinery every exercise check shares.

A check is a function decorated with ``@exercise("title")`` that receives the
student's answer and raises:

- ``NotAttempted`` (through ``require_attempt`` or ``call``) when the answer is
  still the stub: ``...``, or the generator's own ``raise NotImplementedError("Exercise ...")``
  (a ``NotImplementedError`` raised by PyTorch, e.g. by calling an
  ``nn.ModuleList``, is a real attempt and fails with its cause named): the
  decorator prints a short notice and returns ``False``;
- ``ExerciseFailed`` naming the mistake for a wrong answer;
- nothing for a right one: the decorator prints a success line and returns ``True``.

Whatever else goes wrong inside a check (the student's code raising
``RuntimeError`` on a shape mismatch, say) becomes an ``ExerciseFailed`` that
says so: no raw traceback from the check's internals reaches the student.
Checks run in a forked random state, so running (or skipping) one never
changes the random numbers of the cells after it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import torch
from torch import Tensor

__all__ = [
    "ExerciseFailed",
    "NotAttempted",
    "ShortcutUsed",
    "is_stub_error",
    "not_a_stub_message",
    "forbid_forward",
    "expect_deterministic",
    "exercise",
    "require_attempt",
    "is_unattempted",
    "call",
    "expect_tensor",
    "expect_shape",
    "expect_finite",
    "expect_close",
    "dtype_tolerance",
    "expect_equal_answer",
    "describe",
    "use_reference",
]

F = TypeVar("F", bound=Callable[..., Any])


class ExerciseFailed(AssertionError):
    """A wrong answer. The message names the mistake in the student's terms.

    In Jupyter (IPython) only the message is shown, without the traceback
    through the check's internals.
    """

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[0;31mExerciseFailed\x1b[0m: {self}"]


class NotAttempted(Exception):
    """Raised inside a check when the answer is still the stub."""


class ShortcutUsed(ExerciseFailed):
    """The student's forward pass called the very module whose forward it should write."""


_LIBRARY_DIRS = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (torch,) if getattr(m, "__file__", None))


def _innermost_file(err: BaseException) -> str:
    tb = err.__traceback__
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return last.tb_frame.f_code.co_filename if last is not None else ""


def is_stub_error(err: BaseException) -> bool:
    """True only for the stub itself: ``raise NotImplementedError`` or ``raise NotImplementedError("Exercise ...")``.

    The generator writes ``raise NotImplementedError("Exercise: replace this line with your code")``
    (``helpers.student``). A ``NotImplementedError`` with any other message, or raised inside
    PyTorch (``Module [ModuleList] is missing the required "forward" function``), comes from a
    real attempt.
    """
    if not isinstance(err, NotImplementedError):
        return False
    message = str(err)
    if message and not message.startswith("Exercise"):
        return False
    return not _innermost_file(err).startswith(_LIBRARY_DIRS)


def not_a_stub_message(err: BaseException, name: str) -> str:
    """The message for a ``NotImplementedError`` that is not the stub (so a real attempt that failed)."""
    message = str(err)
    text = f"your `{name}` raised NotImplementedError: {message or '(no message)'}. That is not the exercise's stub, so it counts as an attempt"
    if "forward" in message and "Module" in message:
        found = re.search(r"Module \[(\w+)\]", message)
        module = found.group(1) if found else ""
        if module in ("ModuleList", "ModuleDict", "ParameterList", "ParameterDict") or not module:
            text += (
                "; a container such as nn.ModuleList (or nn.ModuleDict) has no forward of its own and cannot be called: "
                "loop over it, `for block in model.blocks: h = block(h)`"
            )
        else:
            text += (
                f"; the module {module} has no `forward` method: define `def forward(self, ...)` inside the class "
                "(indented under `class`, spelled `forward`)"
            )
    return text


@contextlib.contextmanager
def forbid_forward(module: torch.nn.Module, message: str) -> Iterator[None]:
    """While the student's code runs, calling ``module`` itself (``module(x)``, ``module.forward(x)``) fails with ``message``.

    Use around the call of a forward-pass exercise that receives the reference
    module: the exercise asks for the steps, not for the module's own forward.
    Only this one instance is forbidden: its sub-modules (``block.self_attn``,
    ``model.blocks[i]``), even of the same class, stay callable. Raises
    ``ShortcutUsed`` after the call as well, in case the student's code
    swallowed the exception.
    """
    cls = type(module)
    own = cls.__dict__.get("forward")
    original = cls.forward
    used: list[bool] = []

    def sentinel(self, *args: Any, **kwargs: Any) -> Any:
        if self is module:
            used.append(True)
            raise ShortcutUsed(message)
        return original(self, *args, **kwargs)

    cls.forward = sentinel  # type: ignore[method-assign]
    try:
        yield
    finally:
        if own is not None:
            cls.forward = own  # type: ignore[method-assign]
        else:
            del cls.forward
    if used:
        raise ShortcutUsed(message)


def expect_deterministic(first: Tensor, second: Tensor, name: str, hint: str) -> None:
    """Two calls on the same inputs (the module in eval mode) must agree; if not, something random (dropout) is active."""
    if isinstance(first, Tensor) and isinstance(second, Tensor) and first.shape == second.shape:
        if not torch.equal(first.detach().nan_to_num(), second.detach().nan_to_num()):
            raise ExerciseFailed(f"{name} changes from one call to the next on the same inputs: {hint}")


def is_unattempted(answer: object) -> bool:
    """True only for the generator's value stub, ``...`` (Ellipsis).

    ``None`` is not a stub (the generator never writes it): an answer that is ``None``
    (a function without ``return``, ``x = print(...)``) is a real attempt and fails by name.
    """
    return answer is Ellipsis


def require_attempt(answer: object, what: str = "the answer") -> None:
    """Raise ``NotAttempted`` when ``answer`` is still ``...``; ``ExerciseFailed`` when it is ``None``."""
    if is_unattempted(answer):
        raise NotAttempted(f"replace the `...` of {what} with your answer")
    if answer is None:
        raise ExerciseFailed(
            f"{what} is None: give your answer as a value (a function without `return`, or `x = print(...)`, gives None)"
        )


def describe(*tensors: object) -> str:
    """Short description of inputs for messages: ``q (2, 3, 5), k (2, 4, 5)``-style."""
    parts = []
    for t in tensors:
        if isinstance(t, Tensor):
            parts.append(f"a tensor of shape {tuple(t.shape)}")
        else:
            parts.append(repr(t))
    return ", ".join(parts)


def call(fn: Callable[..., Any], *args: Any, what: str | None = None, inplace_ok: bool = False, **kwargs: Any) -> Any:
    """Call the student's function; turn its exceptions into the check's language.

    The stub's ``NotImplementedError`` -> ``NotAttempted`` (any other one is a failed
    attempt, see ``is_stub_error``); ``ExerciseFailed`` passes through;
    any other exception -> ``ExerciseFailed`` naming the inputs and the error.
    A function that changes a tensor argument in place fails, unless ``inplace_ok``
    (for checks that hand over copies, where ``x += ...`` is harmless).
    """
    name = getattr(fn, "__name__", type(fn).__name__)
    if is_unattempted(fn):
        raise NotAttempted(f"{name} is still `...`")
    inputs = (
        []
        if inplace_ok
        else [(i, a, a.detach().clone()) for i, a in enumerate([*args, *kwargs.values()]) if isinstance(a, Tensor)]
    )
    try:
        result = fn(*args, **kwargs)
    except NotImplementedError as err:
        if is_stub_error(err):
            raise NotAttempted(f"`{name}` still raises NotImplementedError: fill in its body") from None
        raise ExerciseFailed(not_a_stub_message(err, name)) from None
    except (ExerciseFailed, NotAttempted):
        raise
    except Exception as err:  # the student's code failed: report it, not our internals
        described = what if what is not None else describe(*args, *kwargs.values())
        raise ExerciseFailed(
            f"calling your `{name}` with {described} raised {type(err).__name__}: {err}{_error_hint(err, args, kwargs)}"
        ) from None
    for i, arg, before in inputs:
        if arg.shape != before.shape or not torch.equal(arg.detach().nan_to_num(), before.nan_to_num()):
            raise ExerciseFailed(
                f"your `{name}` changed its input (argument {i + 1}) in place, e.g. with `-=` or a method ending in `_`; "
                "compute a new tensor and leave the inputs as they were"
            )
    return result


def _error_hint(err: Exception, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """A hint for errors whose cause the raw message hides (the type of a value, not its shape)."""
    message = str(err)
    if "return_types" in message:  # x.max(dim) and friends return (values, indices)
        return (
            ". With a `dim`, x.max(dim) and x.min(dim) return a pair (values, indices), not a tensor: take `.values` "
            "(x.max(dim, keepdim=True).values), or use x.amax(dim, keepdim=True), which returns the tensor alone"
        )
    inputs_numpy = any(type(a).__module__ == "numpy" for a in [*args, *kwargs.values()])
    if isinstance(err, TypeError) and inputs_numpy and ("numpy.ndarray" in message or "must be Tensor" in message):
        return (
            ". The cause is the type, not the shapes: this call passes numpy arrays, and torch functions such as "
            "torch.matmul accept only tensors; use the `@` operator (it works for numpy arrays and torch tensors alike)"
        )
    return ""


def expect_tensor(actual: object, name: str) -> Tensor:
    """The answer must be a torch tensor (a numpy array is named as such)."""
    if isinstance(actual, Tensor):
        return actual
    kind = type(actual).__name__
    hint = " (convert with torch.from_numpy, or use torch operations)" if kind == "ndarray" else ""
    raise ExerciseFailed(f"{name} should be a torch.Tensor, got {kind}{hint}")


def _shape_message(got: tuple[int, ...], want: tuple[int, ...], name: str) -> str:
    if len(got) != len(want):
        return f"{name} has {len(got)} axes with shape {got}, expected {len(want)} axes with shape {want}"
    bad = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
    axes = ", ".join(f"axis {i} has size {got[i]} but should be {want[i]}" for i in bad)
    msg = f"{name} has the wrong shape: {axes} (got {got}, expected {want})"
    if sorted(got) == sorted(want):
        msg += "; the sizes are right but in the wrong order: an axis is swapped or a transpose is missing"
    return msg


def expect_shape(actual: Tensor, expected: Sequence[int], name: str) -> None:
    """Raise naming the axis whose size is wrong."""
    got, want = tuple(actual.shape), tuple(expected)
    if got != want:
        raise ExerciseFailed(_shape_message(got, want, name))


def expect_finite(actual: Tensor, name: str, hint: str = "") -> None:
    """Raise if ``actual`` holds NaN or inf."""
    if actual.is_floating_point() and not torch.isfinite(actual).all():
        n_nan = int(torch.isnan(actual).sum())
        n_inf = int(torch.isinf(actual).sum())
        raise ExerciseFailed(f"{name} contains {n_nan} NaN and {n_inf} inf values{': ' + hint if hint else ''}")


def _close(a: Tensor, b: Tensor, atol: float, rtol: float, equal_nan: bool = False) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol, equal_nan=equal_nan))


def expect_close(
    actual: object,
    expected: Tensor,
    name: str,
    atol: float = 1e-6,
    rtol: float = 1e-5,
    mistakes: Mapping[str, Tensor | None] | None = None,
    nonfinite_hint: str = "",
) -> Tensor:
    """Compare the student's tensor with the reference; explain any difference.

    ``mistakes`` maps a message to the output a typical mistake would give; when
    the answer matches one of them (same shape, within tolerance), that message
    is raised. Otherwise the report says which axis has the wrong size, or where
    values differ and by how much.
    """
    actual = expect_tensor(actual, name)
    actual_d = actual.detach().to("cpu")
    expected = expected.detach().to("cpu")
    # the tolerance follows the dtype: an answer computed in float32 is judged at float32's precision
    floor_atol, floor_rtol = dtype_tolerance(actual_d.dtype)
    atol, rtol = max(atol, floor_atol), max(rtol, floor_rtol)
    for message, wrong in (mistakes or {}).items():
        if (
            wrong is not None
            and _close(actual_d, wrong.detach().to("cpu"), atol, rtol, equal_nan=True)
            and not _close(wrong, expected, atol, rtol)
        ):
            raise ExerciseFailed(f"{name}: {message}")
    expect_shape(actual_d, expected.shape, name)
    expect_finite(actual_d, name, nonfinite_hint)
    if not _close(actual_d, expected, atol, rtol):
        diff = (actual_d.double() - expected.double()).abs()
        idx = tuple(int(i) for i in torch.nonzero(diff == diff.max())[0])
        n_bad = int((diff > atol + rtol * expected.double().abs()).sum())
        got, want, largest = actual_d[idx].item(), expected[idx].item(), diff.max().item()
        digits = _digits_to_show(got, want)
        raise ExerciseFailed(
            f"{name} differs from the reference in {n_bad} of {diff.numel()} entries; the largest difference is "
            f"{largest:.4g} at index {idx}: you gave {got:.{digits}g}, expected {want:.{digits}g} "
            f"(allowed: {atol:.0e} + {rtol:.0e} x |expected|, for {str(actual_d.dtype).replace('torch.', '')})"
        )
    return actual


def dtype_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """The smallest (atol, rtol) that makes sense for a result computed in ``dtype``."""
    if dtype in (torch.float16, torch.bfloat16):
        return 1e-2, 1e-2
    if dtype == torch.float32:
        return 1e-5, 1e-4
    return 0.0, 0.0


def _digits_to_show(a: float, b: float) -> int:
    """Significant digits that make two different numbers print differently (6 at least, 17 at most)."""
    if a == b or not (math.isfinite(a) and math.isfinite(b)):
        return 6
    scale = max(abs(a), abs(b))
    return int(min(17, max(6, math.ceil(math.log10(scale / abs(a - b))) + 2)))


def expect_equal_answer(answer: object, expected: object, what: str, hints: Mapping[object, str] | None = None) -> None:
    """For value answers (a shape tuple, a count): equal, or a hint for a known wrong value."""
    require_attempt(answer, what)
    normalised = tuple(answer) if isinstance(answer, (list, torch.Size)) else answer
    want = tuple(expected) if isinstance(expected, (list, torch.Size)) else expected
    if normalised == want:
        return
    for wrong, hint in (hints or {}).items():
        if normalised == wrong:
            raise ExerciseFailed(f"{what}: {answer!r} is not right: {hint}")
    if isinstance(want, tuple) and isinstance(normalised, tuple) and all(isinstance(x, int) for x in normalised):
        raise ExerciseFailed(_shape_message(normalised, want, what))
    raise ExerciseFailed(f"{what}: {answer!r} is not right")


def exercise(title: str, seed: int = 1234) -> Callable[[F], F]:
    """Decorator that turns a check body into a student-facing check.

    The body runs with torch's random state forked and seeded with ``seed``
    (fresh but reproducible inputs; the notebook's own random stream is left
    untouched). Returns ``True`` on success and ``False`` when not attempted.
    """

    def decorate(body: F) -> F:
        @functools.wraps(body)
        def check(*args: Any, **kwargs: Any) -> bool:
            try:
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(seed)
                    body(*args, **kwargs)
            except NotAttempted as why:
                print(f"⏳ {title}: not attempted yet ({why}).")
                return False
            except ExerciseFailed as err:
                raise ExerciseFailed(f"{title}: {err}") from None
            except NotImplementedError as err:  # raised outside `call`, e.g. by a class's __init__
                if is_stub_error(err):
                    print(f"⏳ {title}: not attempted yet (your code still raises NotImplementedError: fill it in).")
                    return False
                raise ExerciseFailed(f"{title}: {not_a_stub_message(err, 'code')}") from None
            except Exception as err:  # never let the check's internals reach the student
                raise ExerciseFailed(f"{title}: your answer could not be checked: {type(err).__name__}: {err}") from None
            print(f"✅ {title}: correct.")
            return True

        check.__signature__ = inspect.signature(body)  # type: ignore[attr-defined]
        return check  # type: ignore[return-value]

    return decorate


def use_reference(reference: F, name: str | None = None) -> F:
    """Announce that the notebook continues with the reference from ``helpers`` and return it.

    Use after a check that returned ``False``::

        if not check_softmax(softmax):
            softmax = use_reference(helpers.attention.softmax)
    """
    label = name or f"{reference.__module__}.{getattr(reference, '__qualname__', reference)}"
    print(f"   -> the cells below use the reference `{label}` until you finish this exercise.")
    return reference
