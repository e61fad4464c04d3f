"""The machinery every exercise check shares.

A check is a function decorated with ``@exercise("title")`` that receives the
student's answer. Its body raises:

- ``NotAttempted`` (through ``require_attempt`` or ``call``) when the answer is
  still the stub: ``...``, or the generator's own ``raise NotImplementedError("Exercise ...")``
  (a ``NotImplementedError`` raised by PyTorch, e.g. by calling an
  ``nn.ModuleList``, is a real attempt and fails with its cause named): the
  decorator prints a short notice and returns ``False``;
- ``ExerciseFailed`` naming the mistake for a wrong answer: the decorator shows
  the named mistake as a failure (``❌ ExerciseFailed: ...`` on stderr, red in
  Jupyter) and returns ``False``, so the notebook goes on with the reference
  (nothing blocks Run All); the closing ``summary()`` lists it as wrong;
- nothing for a right one: the decorator prints a success line and returns ``True``.

Where a wrong answer must raise instead (``ExerciseFailed``), the decorator raises:
in the test suite (``raise_failures(True)``, or ``COURSE_CHECKS_RAISE=1``), and
under nbgrader (``COURSE_GRADING=1``, set by ``nbgrader_config.py``), where "not
attempted" raises too, so that ``nbgrader validate`` fails a blank notebook as
autograding scores it 0.

Whatever else goes wrong inside a check (the student's code raising
``RuntimeError`` on a shape mismatch, say) becomes an ``ExerciseFailed`` that
says so: no raw traceback from the check's internals reaches the student.
Checks run in a forked random state, so running (or skipping) one never
changes the random numbers of the cells after it.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import math
import os
import re
import sys
import textwrap
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
    "call_attempt",
    "more_than_the_stub",
    "expect_tensor",
    "expect_device",
    "device_mixup_hint",
    "expect_shape",
    "expect_finite",
    "expect_close",
    "dtype_tolerance",
    "expect_equal_answer",
    "describe",
    "use_reference",
    "choose",
    "summary",
    "outcomes",
    "unrecorded",
    "raise_failures",
    "RAISE_ENV",
    "GRADING_ENV",
]

#: Set to "1" to make a check raise ``ExerciseFailed`` for a wrong answer instead of showing it and returning False.
RAISE_ENV = "COURSE_CHECKS_RAISE"
#: Set to "1" by nbgrader_config.py: a wrong answer and "not attempted" both raise (a failed test cell for nbgrader).
GRADING_ENV = "COURSE_GRADING"
_RAISE = {"on": False}
_RECORD = {"on": True}
#: The references that ``use_reference``/``choose`` put in place of an answer that did not pass, kept by identity: a
#: check cell run again would otherwise check the course's reference and say "correct" (``exercise``).
_STANDING_IN: dict[int, object] = {}
#: Each check's title -> what it said last in this kernel: "correct", "not attempted: ...", "wrong: ..." (in call order).
_OUTCOMES: dict[str, str] = {}

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
    (``helpers.authoring.student``), directly in the function's body. A ``NotImplementedError`` with any other
    message, raised inside PyTorch (``Module [ModuleList] is missing the required "forward" function``), or raised
    in a branch of the learner's code (``if causal: raise NotImplementedError``: ``in_a_branch``) comes from a real
    attempt.
    """
    if not isinstance(err, NotImplementedError):
        return False
    message = str(err)
    if message and not message.startswith("Exercise"):
        return False
    return not _innermost_file(err).startswith(_LIBRARY_DIRS) and not in_a_branch(err)


_UNFINISHED = (
    "it reached a `raise NotImplementedError` that is still in your code, inside a branch (an `if`, a loop) of code "
    "that is otherwise written: that is partial work, an unfinished branch, not an exercise left untouched; finish "
    "that branch (or remove the raise)"
)
_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match)


def in_a_branch(err: BaseException) -> bool:
    """True when the ``raise`` that raised ``err`` sits inside an ``if``, a loop, a ``with`` or a ``try`` of its function.

    The generator's stub is a statement of the function's body itself; a ``raise NotImplementedError`` under
    ``if causal:`` is a branch the learner left unfinished in code that is otherwise written. False when the source
    cannot be read.
    """
    tb = err.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    code, line = tb.tb_frame.f_code, tb.tb_lineno
    try:
        lines, first = inspect.getsourcelines(code)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, ValueError, IndentationError):
        return False
    target = line - first + 1  # the raise's line within the parsed source
    function = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if function is None:
        return False

    def nested(statements: list[ast.stmt], depth: int) -> bool | None:
        for statement in statements:
            if isinstance(statement, ast.Raise) and statement.lineno == target:
                return depth > 0
            if isinstance(statement, _COMPOUND + (ast.FunctionDef, ast.ClassDef)):
                for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                    for child in getattr(statement, field, []) or []:
                        block = getattr(child, "body", None) if isinstance(child, (ast.ExceptHandler, ast.match_case)) else None
                        inner = nested(block if block is not None else [child], depth + isinstance(statement, _COMPOUND))
                        if inner is not None:
                            return inner
        return None

    return bool(nested(function.body, 0))


def not_a_stub_message(err: BaseException, name: str) -> str:
    """The message for a ``NotImplementedError`` that is not the stub (so a real attempt that failed)."""
    message = str(err)
    if in_a_branch(err):
        return f"your `{name}`: {_UNFINISHED}"
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
        if in_a_branch(err):
            described = what if what is not None else describe(*args, *kwargs.values())
            raise ExerciseFailed(f"calling your `{name}` with {described}: {_UNFINISHED}") from None
        raise ExerciseFailed(not_a_stub_message(err, name)) from None
    except (ExerciseFailed, NotAttempted):
        raise
    except Exception as err:  # the student's code failed: report it, not our internals
        described = what if what is not None else describe(*args, *kwargs.values())
        hint = _error_hint(err, args, kwargs)
        text = str(err).rstrip(".") if hint else str(err)
        raise ExerciseFailed(f"calling your `{name}` with {described} raised {type(err).__name__}: {text}{hint}") from None
    for i, arg, before in inputs:
        if arg.shape != before.shape or not torch.equal(arg.detach().nan_to_num(), before.nan_to_num()):
            raise ExerciseFailed(
                f"your `{name}` changed its input (argument {i + 1}) in place, e.g. with `-=` or a method ending in `_`; "
                "compute a new tensor and leave the inputs as they were"
            )
    return result


def more_than_the_stub(fn: object) -> bool:
    """True when ``fn``'s body holds code besides its docstring and the stub's ``raise NotImplementedError``.

    A function whose one unfinished branch still raises the stub's ``NotImplementedError`` is partial work, not an
    untouched exercise (``call_attempt``). False when the source cannot be read (a lambda, a built-in).
    """
    import ast
    import textwrap

    if not (inspect.isroutine(fn) or inspect.isclass(fn)) and inspect.isroutine(getattr(type(fn), "forward", None)):
        fn = type(fn).forward  # a module instance (an nn.Module exercise): its forward is the learner's code
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))  # type: ignore[arg-type]
    except (OSError, TypeError, SyntaxError, ValueError):
        return False
    defs = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not defs:
        return False
    body = [
        s
        for s in defs[0].body
        if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)) and not isinstance(s, ast.Pass)
    ]
    return not (len(body) == 1 and isinstance(body[0], ast.Raise) and "NotImplementedError" in ast.unparse(body[0]))


#: PyTorch's complaints about tensors on two devices (a GPU learner's tensor made without the inputs' device).
DEVICE_ERROR = re.compile(r"on the same device|is not on the expected device|found at least two devices")
_ELSEWHERE = "a tensor made inside your function took another device (the notebook's `device`, or .cuda())"


def expect_device(out: object, like: Tensor, what: str, fix: str) -> None:
    """A returned tensor must live where the inputs do (a learner on a GPU passes CUDA tensors); ``fix`` says how."""
    if isinstance(out, Tensor) and out.device != like.device:
        raise ExerciseFailed(
            f"{what} came back on device {out.device}, but the inputs are on {like.device}: {_ELSEWHERE}; take it from "
            f"the inputs, {fix}"
        )


def device_mixup_hint(err: BaseException, fix: str) -> str:
    """The cause of PyTorch's "tensors on two devices" error, with ``fix``; "" for any other error."""
    if DEVICE_ERROR.search(str(err)):
        return (
            "Your code made a tensor on another device than its inputs (the notebook's `device`, or .cuda()): take the "
            f"device from the inputs, {fix}"
        )
    return ""


def call_attempt(fn: Callable[..., Any], *args: Any, what: str | None = None, **kwargs: Any) -> Any:
    """``call``, except that a stub ``NotImplementedError`` raised by a function with real code in it is a named failure.

    A partial answer (``if gap == 0: raise NotImplementedError``, the rest written) is an attempt: the check says
    which input reached the unfinished branch instead of calling the whole exercise "not attempted".
    """
    try:
        return call(fn, *args, what=what, **kwargs)
    except NotAttempted:
        if not more_than_the_stub(fn):
            raise
        name = getattr(fn, "__name__", type(fn).__name__)
        described = what if what is not None else describe(*args, *kwargs.values())
        raise ExerciseFailed(
            f"calling your `{name}` with {described}: it reached a `raise NotImplementedError` that is still in your "
            "code: the rest of the function is written, so this is partial work, an unfinished branch, not an exercise "
            "left untouched; finish that branch (or remove the raise)"
        ) from None


def _error_hint(err: Exception, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """A hint for errors whose cause the raw message hides (the type of a value, not its shape)."""
    message = str(err)
    # x.max(dim) and friends return (values, indices): named from the message, or from a variable of the failing code
    # that holds such a pair when the error is about a type (a shape error next to a pair used right is not its fault)
    if "return_types" in message or (isinstance(err, (TypeError, AttributeError)) and _return_types_in_frames(err)):
        return (
            ". With a `dim`, x.max(dim) and x.min(dim) (and topk, sort) return a pair (values, indices), not a tensor: take "
            "`.values` (x.max(dim, keepdim=True).values), or use x.amax(dim, keepdim=True), which returns the tensor alone"
        )
    inputs_numpy = any(type(a).__module__ == "numpy" for a in [*args, *kwargs.values()])
    if isinstance(err, TypeError) and inputs_numpy and ("numpy.ndarray" in message or "must be Tensor" in message):
        return (
            ". The cause is the type, not the shapes: this call passes numpy arrays, and torch functions such as "
            "torch.matmul accept only tensors; use the `@` operator (it works for numpy arrays and torch tensors alike)"
        )
    for pattern, hint in _ERROR_HINTS:
        if re.search(pattern, message):
            return ". " + hint
    return ""


#: (regular expression on the error message, hint): the first that matches is added to the message of a failed call.
_ERROR_HINTS: tuple[tuple[str, str], ...] = (
    (
        r"only one element tensors can be converted to Python scalars",
        "A Python function of one number (math.exp, math.sqrt, math.log, float()) was given a whole tensor: use the "
        "element-wise torch version (torch.exp, torch.sqrt, torch.log)",
    ),
    (
        r"must be Tensor, not (int|float)",
        "A torch function (torch.sqrt, torch.exp...) was given a plain number: for a number use math.sqrt(d_k) or d_k ** 0.5",
    ),
    (
        r"view size is not compatible with input tensor's size and stride",
        "After transpose or permute the tensor is no longer contiguous in memory, so .view refuses it: use "
        ".reshape(...) (it copies when it must), or .contiguous().view(...)",
    ),
    (
        r"is invalid for input of size|don't multiply up to the size",
        "The sizes asked for do not multiply to the tensor's number of elements: compute them from the inputs' "
        "shapes (d_k = d_model // num_heads, H // p...) instead of hard-coding the sizes of an example, and check "
        "which axis you split",
    ),
    (
        r"tuple of ints,\s*but got float|slice indices must be integers|'float' object cannot be interpreted as an integer",
        "A size or an index is a float: in Python 3, d_model / num_heads is a float even when it divides evenly; use "
        "integer division, d_model // num_heads",
    ),
    (
        r"for [-+*/@]+: '(Tensor|tuple)' and '(tuple|Tensor)'|must be Tensor, not tuple",
        "One operand is a tuple: a call that returns several values must be unpacked first; e.g. "
        "self-attention returns (out, weights): out, _ = block.self_attn(x, x, x, mask), or take [0]",
    ),
    (
        r"same dtype|expected scalar type (Double|Float) but found (Double|Float)|expected m1 and m2 to have the same dtype",
        "float32 and float64 tensors are mixed: a tensor created without a dtype (torch.zeros, torch.tensor, "
        "torch.arange of floats) is float32, and .float() converts to float32; create new tensors with "
        "dtype=x.dtype (and device=x.device) so that everything stays in the inputs' dtype",
    ),
    (
        r"backward through the graph a second time",
        "loss.backward() ran twice on the same graph: call it exactly once per step",
    ),
    (
        r"does not require grad and does not have a grad_fn",
        "The loss has no graph to backpropagate through: the forward pass ran under torch.no_grad() (or the loss was "
        "detached); compute the loss with gradients enabled and call .backward() on that tensor",
    ),
    (
        r"'float' object has no attribute 'backward'",
        "The loss is already a Python float (.item() was taken first): call loss.backward() on the tensor and "
        "return loss.item() at the end",
    ),
    (
        r"'int' object is not callable",
        "An int was called like a function: often x.size(-1) on a numpy array, whose .size is its number of elements "
        "(an int, not a method as in torch): use x.shape[-1], which works for numpy and torch (or a name that held a "
        "function was given a number)",
    ),
    (
        r"1D tensors expected",
        "Tensor.dot is the dot product of two 1-D vectors: for matrices and batches use the `@` operator",
    ),
    (
        r"self must be a matrix",
        "torch.mm takes 2-D matrices only: use the `@` operator (torch.matmul), which also handles a batch axis",
    ),
    (
        r"expected np.ndarray \(got Tensor\)",
        "torch.from_numpy takes numpy arrays only, and the check also passes torch tensors: the `@` operator "
        "works for both without converting",
    ),
    (
        r"'NoneType' object (has no attribute|is not subscriptable)|unsupported operand type\(s\) for .*'NoneType'",
        "A value is None: a function without `return` gives None, and so does an optional part that this model does not have",
    ),
)


def _return_types_in_frames(err: BaseException) -> bool:
    """True when a variable of the student's code that failed holds a (values, indices) pair such as x.max(dim)'s."""
    tb = err.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if not frame.f_code.co_filename.startswith(_LIBRARY_DIRS) and frame.f_code.co_filename != __file__:
            if any(type(v).__module__ == "torch.return_types" for v in list(frame.f_locals.values())):
                return True
        tb = tb.tb_next
    return False


def _type_hint(actual: object) -> str:
    """Why a value of this type is not the tensor expected, and how to make it one (an empty string if nothing to say)."""
    kind = type(actual).__name__
    if kind == "ndarray":
        return " (convert with torch.from_numpy, or use torch operations)"
    if type(actual).__module__ == "torch.return_types":
        alone = f", or use x.a{kind}(dim), which returns the tensor alone" if kind in ("max", "min") else ""
        return f": x.{kind}(...) returns a pair (values, indices); take `.values`{alone}"
    if actual is None:
        return ": the value is None (a function without a `return` gives None): return the result"
    if isinstance(actual, (tuple, list)):
        parts = ", ".join(type(a).__name__ for a in actual[:4]) + (", ..." if len(actual) > 4 else "")
        if actual and all(isinstance(a, Tensor) for a in actual):
            return (
                f" of {len(actual)} tensors ({parts}): return one tensor; pieces are combined with torch.cat (along an "
                "existing axis) or torch.stack (along a new one), and a call that returns (out, weights) is unpacked, "
                "out, _ = ..."
            )
        return f" ({parts}): return one tensor"
    return ""


def expect_tensor(actual: object, name: str) -> Tensor:
    """The answer must be a torch tensor (a numpy array is named as such)."""
    if isinstance(actual, Tensor):
        return actual
    raise ExerciseFailed(f"{name} should be a torch.Tensor, got {type(actual).__name__}{_type_hint(actual)}")


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
    float32_path: bool = False,
) -> Tensor:
    """Compare the student's tensor with the reference; explain any difference.

    ``mistakes`` maps a message to the output a typical mistake would give; when
    the answer matches one of them (same shape, within tolerance), that message
    is raised. Otherwise the report says which axis has the wrong size, or where
    values differ and by how much.

    A float64 answer whose values are all float32 numbers and that agrees to float32's precision is named as a
    precision problem. With ``float32_path``, so is a float64 answer that agrees only to about 6 significant digits
    although its values are not float32 numbers (a float32 tensor or number, ``torch.tensor(beta)`` say, entered a
    float64 computation): use it where no right formula differs from the reference by so little.
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
        in_float32 = _computed_in_float32(actual_d, expected)
        f32_atol, f32_rtol = dtype_tolerance(torch.float32)
        mixed = float32_path and actual_d.dtype == torch.float64 and _close(actual_d, expected, 1e-6, 1e-5)
        if mixed or (in_float32 and _close(actual_d, expected, max(atol, f32_atol), max(rtol, f32_rtol))):
            largest = (actual_d.double() - expected.double()).abs().max().item()
            raise ExerciseFailed(
                f"{name} is a precision problem, not a wrong formula: it agrees with the reference only to float32's "
                f"precision (about 7 significant digits; the largest difference is {largest:.2g}), though it is float64 "
                "like the inputs. Somewhere your code computes in float32 and converts back: a tensor created without a "
                "dtype (torch.tensor(...), torch.zeros(...), torch.ones(...) and torch.arange of floats give float32) or a "
                ".float(). Create new tensors with dtype=x.dtype (the inputs' dtype), so that float64 inputs give a result "
                "computed in float64"
            )
        diff = (actual_d.double() - expected.double()).abs()
        idx = tuple(int(i) for i in torch.nonzero(diff == diff.max())[0])
        n_bad = int((diff > atol + rtol * expected.double().abs()).sum())
        got, want, largest = actual_d[idx].item(), expected[idx].item(), diff.max().item()
        digits = _digits_to_show(got, want)
        raise ExerciseFailed(
            f"{name} differs from the reference in {n_bad} of {diff.numel()} entries; the largest difference is "
            f"{largest:.4g} at index {idx}: you gave {got:.{digits}g}, expected {want:.{digits}g} "
            f"(allowed: {atol:.0e} + {rtol:.0e} x |expected|, for {str(actual_d.dtype).replace('torch.', '')})"
            + (
                "; note that your float64 values are rounded to float32 (something computes in float32: create new "
                "tensors with dtype=x.dtype)"
                if in_float32
                else ""
            )
        )
    return actual


def _computed_in_float32(actual: Tensor, expected: Tensor) -> bool:
    """True for a float64 answer whose every value is a float32 number although the float64 reference's are not.

    That is the trace of a computation done in float32 and converted back (a tensor made without a dtype);
    a genuine float64 computation gives float32-representable values only by a vanishing chance.
    """
    if actual.dtype != torch.float64 or expected.shape != actual.shape:
        return False
    finite = torch.isfinite(actual) & torch.isfinite(expected.to(actual.dtype))
    a, e = actual[finite], expected.double()[finite]
    if a.numel() < 4 or not torch.equal(a.float().double(), a):
        return False
    return int((e.float().double() != e).sum()) >= min(4, e.numel())


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


def raise_failures(on: bool = True) -> None:
    """Make every check raise ``ExerciseFailed`` for a wrong answer (``True``: the tests) or show it and go on (``False``)."""
    _RAISE["on"] = on


def _raising() -> bool:
    return _RAISE["on"] or os.environ.get(RAISE_ENV, "") == "1" or _grading()


def _grading() -> bool:
    return os.environ.get(GRADING_ENV, "") == "1"


@contextlib.contextmanager
def unrecorded() -> Iterator[None]:
    """Checks run inside this block (a demonstration of a wrong answer, say) leave ``summary()`` as it was."""
    saved = _RECORD["on"]
    _RECORD["on"] = False
    try:
        yield
    finally:
        _RECORD["on"] = saved


def _record(check: Any, title: str, outcome: str) -> None:
    if _RECORD["on"]:
        _OUTCOMES[title] = check.outcome = outcome


def outcomes() -> dict[str, str]:
    """What each check said last in this kernel, in the order the checks were first run (a copy)."""
    return dict(_OUTCOMES)


def _show_failure(message: str) -> None:
    """A wrong answer, shown as a failure in the check cell's output (stderr: red in JupyterLab, Colab and VS Code)."""
    print(f"\x1b[0;31m❌ ExerciseFailed\x1b[0m: {message}", file=sys.stderr, flush=True)


_NO_FALLBACK = object()


def _label(obj: object) -> str:
    """How a message names an implementation: ``helpers.attention.softmax``, ``TransformerClassifier.forward``."""
    module = getattr(obj, "__module__", "") or ""
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__
    return f"{module}.{name}" if module.startswith("helpers") else str(name)


def exercise(title: str, seed: int = 1234) -> Callable[[F], F]:
    """Decorator that turns a check body into a student-facing check.

    The body runs with torch's random state forked and seeded with ``seed``
    (fresh but reproducible inputs; the notebook's own random stream is left
    untouched). Returns ``True`` on success, ``False`` when not attempted and
    ``False`` for a wrong answer, whose named mistake is shown as a failure
    (or raised: see the module's docstring). The outcome is recorded for
    ``summary()``, in the check's ``outcome`` attribute and in ``passed``.

    Where the cells below run the learner's answer, the check cell names the course's version to fall back on, and
    the check returns the implementation to use, saying which in its one verdict line::

        softmax = check_softmax(softmax, fallback=helpers.attention.softmax)
        # ✅ softmax: correct; the cells below use yours.
        # (or) ❌ ExerciseFailed: softmax: ... The cells below use the course's `helpers.attention.softmax` until yours passes.

    ``fallback_name`` names the fallback where its own name would mislead (a method: ``"TransformerClassifier.forward"``).
    """

    def decorate(body: F) -> F:
        def not_attempted(why: str, then: str) -> bool:
            _record(check, title, f"not attempted: {why}")
            if _grading():
                raise ExerciseFailed(f"{title}: not attempted yet ({why})")
            print(f"⏳ {title}: not attempted yet ({why}){'; ' + then if then else ''}.")
            return False

        def wrong(message: str, then: str) -> bool:
            _record(check, title, f"wrong: {message}")
            if _raising():
                raise ExerciseFailed(f"{title}: {message}")
            after = f". {then[0].upper()}{then[1:]} until yours passes." if then else ""
            _show_failure(f"{title}: {message.rstrip('.') + after if then else message}")
            return False

        def verdict(*args: Any, then_ref: str, then_yours: str, **kwargs: Any) -> bool:
            if args and id(args[0]) in _STANDING_IN and _STANDING_IN[id(args[0])] is args[0]:
                print(
                    f"⏳ {title}: this is still the course's reference, which took over when your answer did not pass; "
                    "it is not your answer, so it is not checked. Run your exercise cell again (it defines your "
                    "version), then this cell."
                )
                return False
            try:
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(seed)
                    body(*args, **kwargs)
            except NotAttempted as why:
                return not_attempted(str(why), then_ref)
            except ExerciseFailed as err:
                return wrong(str(err), then_ref)
            except NotImplementedError as err:  # raised outside `call`, e.g. by a class's __init__
                if is_stub_error(err):
                    return not_attempted("your code still raises NotImplementedError: fill it in", then_ref)
                return wrong(not_a_stub_message(err, "code"), then_ref)
            except Exception as err:  # never let the check's internals reach the student
                return wrong(f"your answer could not be checked: {type(err).__name__}: {err}", then_ref)
            _record(check, title, "correct")
            print(f"✅ {title}: correct{'; ' + then_yours if then_yours else ''}.")
            return True

        @functools.wraps(body)
        def check(*args: Any, fallback: Any = _NO_FALLBACK, fallback_name: str | None = None, **kwargs: Any) -> Any:
            if fallback is _NO_FALLBACK:
                check.passed = verdict(*args, then_ref="", then_yours="", **kwargs)
                return check.passed
            if not args:
                raise TypeError(f"{check.__name__}(answer, fallback=...): give the answer to check")
            label = fallback_name or _label(fallback)
            check.passed = verdict(
                *args, then_ref=f"the cells below use the course's `{label}`", then_yours="the cells below use yours", **kwargs
            )
            if check.passed:
                return args[0]
            _STANDING_IN[id(fallback)] = fallback
            return fallback

        check.__signature__ = inspect.signature(body)  # type: ignore[attr-defined]
        check.title = title  # type: ignore[attr-defined]
        check.outcome = "not checked yet"  # type: ignore[attr-defined]
        check.passed = False  # type: ignore[attr-defined]
        return check  # type: ignore[return-value]

    return decorate


def use_reference(reference: F, name: str | None = None) -> F:
    """Announce that the notebook continues with the reference from ``helpers`` and return it.

    Use after a check that returned ``False`` (not attempted, or a wrong answer)::

        if not check_softmax(softmax):
            softmax = use_reference(helpers.attention.softmax)
    """
    label = name or f"{reference.__module__}.{getattr(reference, '__qualname__', reference)}"
    print(f"   -> the cells below use the reference `{label}` until your answer passes this check.")
    _STANDING_IN[id(reference)] = reference
    return reference


def choose(passed: bool, yours: F, reference: F, name: str | None = None) -> F:
    """Your version if its check passed, else the reference; prints which one the cells below run.

    ::

        shift_right = choose(passed["shift_right"], shift_right, helpers.models.seq2seq.shift_right)
        # -> the cells below use your `shift_right` (it passed its check).
    """
    if passed is True:
        label = name or getattr(yours, "__name__", type(yours).__name__)
        print(f"   -> the cells below use your `{label}` (it passed its check).")
        return yours
    return use_reference(reference, name)


def summary() -> None:
    """Print what the exercises of this notebook's session said last (``outcomes()`` holds the same as a dict).

    The last cell of a notebook with exercises: one line when every exercise is correct; otherwise a line for each
    exercise that is not, with its reason, so that a wrong answer shows here as well as in its check cell.
    """
    if not _OUTCOMES:
        print("No exercise was checked in this session.")
        return
    wrong = {t: o for t, o in _OUTCOMES.items() if o.startswith("wrong")}
    missing = {t: o for t, o in _OUTCOMES.items() if o != "correct" and t not in wrong}
    total = len(_OUTCOMES)
    if not wrong and not missing:
        print(f"✅ All {total} exercises correct." if total > 1 else "✅ The exercise is correct.")
        return
    print(f"Exercises: {total - len(wrong) - len(missing)} of {total} correct, {len(wrong)} wrong, {len(missing)} not attempted.")
    for title, outcome in wrong.items():
        print(f"  ❌ {title}: {outcome}")
    for title, outcome in missing.items():
        print(f"  ⏳ {title}: {outcome}")
