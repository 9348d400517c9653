"""The package's op surface against the daemon's: every op gpukit runs is one that gpukitd's
ListOps lists, every op it lists is reached from Python, and each function and operator of
the table in gpukit/_ops.py runs its row's op with one request. (The C++ client's side is
tests/integration/array_flow_test.cc, ListOpsListsEveryOpTheCppClientsHelpersRun.)"""

import ast
import inspect
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import gpukit
from gpukit import _gpukit, _ops
from gpukit._array import Array


def resolve(path):
    """gpukit's attribute at `path` ("add", "nn.relu", "Array.__add__"), unbound; None where
    there is none."""
    target = gpukit
    for part in path.split("."):
        if isinstance(target, type):  # a class's function or property as stored
            target = inspect.getattr_static(target, part, None)
        else:
            target = getattr(target, part, None)
    return target


def test_the_table_has_a_row_for_every_op_constant_and_nothing_else():
    constants = {v for name, v in vars(_ops).items() if name.isupper() and isinstance(v, str)}
    assert constants == set(_ops.REACH)
    assert all(_ops.REACH.values()), "an op with no function or operator"


def test_every_op_the_package_runs_is_one_the_daemon_lists(listed_ops):
    assert set(_ops.REACH) - set(listed_ops) == set()


def test_every_op_the_daemon_lists_is_reached_from_python(listed_ops):
    assert set(listed_ops) - set(_ops.REACH) == set()
    for op, paths in _ops.REACH.items():
        for path in paths:
            assert resolve(path) is not None, f"{op}: gpukit.{path} does not exist"


# Calls that take an op's name: the package's run_op helpers, Session.run_op, _gpukit's
# run_op, the reductions' helper and Array's binary operators' one.
OP_TAKING_CALLS = {"run_op", "reduce", "_binary"}


def test_the_package_spells_op_names_only_in_its_table():
    package = Path(gpukit.__file__).parent
    spelled = []
    for path in sorted(package.glob("*.py")):
        if path.name == "_ops.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", None))
            if name not in OP_TAKING_CALLS:
                continue
            for arg in node.args:
                if isinstance(arg, ast.Constant) and arg.value in _ops.REACH:
                    spelled.append(f"{path.name}:{node.lineno}: {arg.value!r}")
    assert spelled == [], "use gpukit._ops' constants"


class _RecordingClient:
    """Stands in for _gpukit.Client: records the ops it is asked to run."""

    def __init__(self):
        self.ops = []

    def run_op(self, op, inputs, attrs):
        self.ops.append(op)
        return SimpleNamespace(shape=(2, 2), dtype=_gpukit.DType.float32)


# Arguments past the array, for the entries whose other parameters are not arrays.
SPECIAL_ARGUMENTS = {
    "astype": lambda x: (x, np.float32),
    "Array.astype": lambda x: (x, np.float32),
    "reshape": lambda x: (x, (4,)),
    "Array.reshape": lambda x: (x, 4),
    "concatenate": lambda x: ([x, x],),
}


def call_entry(path, x):
    """Calls gpukit.<path> with `x` for each of its array parameters (and x's session as a
    Session method's self)."""
    if path == "Array.T":
        return x.T
    target = resolve(path)
    if path in SPECIAL_ARGUMENTS:
        return target(*SPECIAL_ARGUMENTS[path](x))
    required = [
        p
        for p in inspect.signature(target).parameters.values()
        if p.default is inspect.Parameter.empty
        and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    args = [x] * len(required)
    if path.startswith("Session."):
        args[0] = x.session  # self
    return target(*args)


@pytest.mark.parametrize(
    "op,path", [(op, path) for op, paths in _ops.REACH.items() for path in paths]
)
def test_each_function_and_operator_sends_the_op_of_its_row_once(op, path):
    client = _RecordingClient()
    x = Array(client.run_op("setup", [], {}), SimpleNamespace(_client=client))
    client.ops.clear()
    out = call_entry(path, x)
    assert isinstance(out, Array)
    assert client.ops == [op]


def test_an_operand_of_the_wrong_type_is_a_type_error_naming_the_op_and_input(gk):
    a = gk.zeros(3)
    expected = "add: expected a gpukit.Array, int or float as inputs[1], got str"
    with pytest.raises(TypeError, match=re.escape(expected)):
        gpukit.add(a, "x")
    with pytest.raises(TypeError, match="inputs\\[0\\], got ndarray; upload NumPy data"):
        gk.run_op("clamp", np.ones(3), min=0.0)
    with pytest.raises(TypeError, match="unsupported operand"):  # the operator protocol's
        a - "x"
    # NumPy scalars and bools are numbers; the module takes them as the package hands them.
    assert (a + np.float32(1.5)).tolist() == [1.5] * 3
    assert (np.int64(2) - a).tolist() == [2.0] * 3
    assert gpukit.multiply(a + True, np.bool_(True)).tolist() == [1.0] * 3
