"""The Python error tables against the one table (include/hixl/hixl_errors.h)
and the C header, so they cannot drift.

Every HIXL_ERR_* code that include/hixl/hixl.h defines must be a row of
HIXL_ERROR_CODES (as the native module exports it), be in hixl.errors
(ERR_<NAME>, same value), map to its own exception class, and agree with the
library's hixl_strerror (hixl.strerror) on its name and description; every
engine status of HIXL_ENGINE_STATUSES likewise (ENGINE_<NAME>,
hixl::EngineStatusName).  A code added to a header without its Python side
fails here.  Single process; needs no world.
"""

import os
import re

import pytest

import hixl
from hixl import errors

SOURCE_DIR = os.environ.get("HIXL_SOURCE_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def _header(name):
    with open(os.path.join(SOURCE_DIR, "include", "hixl", name), encoding="utf-8") as f:
        return f.read()


C_HEADER = _header("hixl.h")
C_CODES = {name: int(code) for name, code in re.findall(r"#define HIXL_ERR_(\w+) \((-\d+)\)", C_HEADER)}
TABLE_HEADER = _header("hixl_errors.h")
# The rows as the header spells them (the native module's export is checked against these).
TABLE_ROWS = {name: int(code) for name, code in re.findall(r"X\(HIXL_(?:ERR_)?(\w+), k\w+, (-?\d+),", TABLE_HEADER)}
ENGINE_CODES = {name: int(code) for name, code in re.findall(r"X\(([A-Z_]+), (\d+), \"", TABLE_HEADER)}
ENGINE_FAILURES = {name: code for name, code in ENGINE_CODES.items() if code != 0}
NATIVE_ROWS = hixl._hixl._error_table()
NATIVE_ENGINE_ROWS = hixl._hixl._engine_status_table()


def test_headers_parsed():
    # The regexes still match the headers (else every table test below would pass vacuously).
    assert len(C_CODES) >= 15 and C_CODES["INVALID_ARG"] == -1 and C_CODES["NOT_CONNECTED"] == -14
    assert C_CODES["ALREADY_CONNECTED"] == -15
    assert sorted(C_CODES.values()) == list(range(-len(C_CODES), 0)), "codes are -1..-N without gaps"
    assert len(ENGINE_CODES) >= 8 and ENGINE_CODES["SUCCESS"] == 0 and ENGINE_CODES["PARAM_INVALID"] == 103900


def test_the_c_header_is_the_table():
    assert TABLE_ROWS == dict(C_CODES, SUCCESS=0)
    native = {name: code for code, name, _, _, _ in NATIVE_ROWS}
    assert native == {"HIXL_SUCCESS": 0, **{"HIXL_ERR_" + n: c for n, c in C_CODES.items()}}
    assert {name: status for status, name, _, _ in NATIVE_ENGINE_ROWS} == ENGINE_CODES


def test_every_code_has_a_description_and_an_engine_status():
    for code, name, description, engine_name, class_name in NATIVE_ROWS:
        assert description and hixl.strerror(code) == f"{name}: {description}"
        assert errors.DESCRIPTIONS[code] == description
        assert engine_name in ENGINE_CODES, name
        assert errors.ENGINE_STATUS_FOR[code] == ENGINE_CODES[engine_name]
        assert (class_name == "None") == (code == 0), name


def test_success():
    m = re.search(r"#define HIXL_SUCCESS \(?(-?\d+)\)?", C_HEADER)
    assert m and errors.SUCCESS == int(m.group(1)) == 0
    assert hixl.strerror(errors.SUCCESS).split(":", 1)[0] == "HIXL_SUCCESS" == errors.NAMES[errors.SUCCESS]


@pytest.mark.parametrize("name,code", sorted(C_CODES.items(), key=lambda kv: -kv[1]))
def test_c_code(name, code):
    full = "HIXL_ERR_" + name
    assert getattr(errors, "ERR_" + name) == code
    assert errors.NAMES[code] == full
    # hixl_strerror (the C API, through the binding) names it the same.
    assert hixl.strerror(code).split(":", 1)[0] == full
    cls = errors.CLASSES[code]
    assert issubclass(cls, errors.HixlError) and cls is not errors.HixlError
    assert not issubclass(cls, errors.EngineError)
    assert getattr(hixl, cls.__name__) is cls, "re-exported as hixl.<class>"
    err = errors.error_for(code, "why")
    assert type(err) is cls
    assert err.code == code and err.name == full and err.message == "why" and str(err) == "why"


def test_c_classes_are_distinct():
    classes = [errors.CLASSES[code] for code in C_CODES.values()]
    assert len(set(classes)) == len(classes) == len(C_CODES)


def test_no_codes_beyond_the_header():
    constants = {n[len("ERR_"):]: getattr(errors, n) for n in dir(errors) if n.startswith("ERR_")}
    assert constants == C_CODES
    assert set(errors.CLASSES) == set(C_CODES.values())
    assert set(errors.NAMES) == set(C_CODES.values()) | {errors.SUCCESS}


def test_unknown_code():
    for code in (-len(C_CODES) - 1, -999, 7):
        err = errors.error_for(code, "odd")
        assert type(err) is errors.HixlError and err.code == code and err.name == "HIXL_ERR_UNKNOWN"
        assert hixl.strerror(code).split(":", 1)[0] == "HIXL_ERR_UNKNOWN"


def test_the_binding_raises_through_the_table(monkeypatch):
    # The native module has no table of its own: it raises what
    # hixl.errors.CLASSES says, looked up at the time of the failure.
    # hixl.test needs no world, so this holds before, during and after one.
    with pytest.raises(hixl.InvalidArgumentError) as e:
        hixl.test(0, hixl.CMP_EQ, "one")
    assert type(e.value) is errors.InvalidArgumentError and e.value.code == errors.ERR_INVALID_ARG

    class Marked(errors.InvalidArgumentError):
        pass

    monkeypatch.setitem(errors.CLASSES, errors.ERR_INVALID_ARG, Marked)
    with pytest.raises(Marked) as e:
        hixl.test(0, hixl.CMP_EQ, "two")
    assert e.value.code == errors.ERR_INVALID_ARG and "hixl.test: value must be an int" in str(e.value)


@pytest.mark.parametrize("name,status", sorted(ENGINE_CODES.items(), key=lambda kv: kv[1]))
def test_engine_status(name, status):
    assert getattr(errors, "ENGINE_" + name) == status
    assert errors.ENGINE_NAMES[status] == name
    # hixl::EngineStatusName (the C++ API, through the binding) names it the same.
    assert hixl._hixl._engine_status_name(status) == name
    if status == 0:
        assert status not in errors.ENGINE_CLASSES
        return
    cls = errors.ENGINE_CLASSES[status]
    assert issubclass(cls, errors.EngineError) and cls is not errors.EngineError
    assert getattr(hixl, cls.__name__) is cls, "re-exported as hixl.<class>"
    err = errors.engine_error_for(status, "why")
    assert type(err) is cls
    assert err.code == err.status == status and err.name == name and str(err) == "why"


def test_engine_classes_are_distinct_and_complete():
    classes = [errors.ENGINE_CLASSES[s] for s in ENGINE_FAILURES.values()]
    assert len(set(classes)) == len(classes) == len(ENGINE_FAILURES)
    assert set(errors.ENGINE_CLASSES) == set(ENGINE_FAILURES.values())
    constants = {n[len("ENGINE_"):]: getattr(errors, n) for n in dir(errors)
                 if n.startswith("ENGINE_") and isinstance(getattr(errors, n), int)}
    assert constants == ENGINE_CODES
    assert set(errors.ENGINE_NAMES) == set(ENGINE_CODES.values())


def test_engine_unknown_status():
    err = errors.engine_error_for(1, "odd")
    assert type(err) is errors.EngineError and err.name == "UNKNOWN" == hixl._hixl._engine_status_name(1)


def test_engine_and_c_codes_agree_where_they_overlap():
    # The engine's NOT_CONNECTED is the C code HIXL_ERR_NOT_CONNECTED's class
    # too (ALREADY_CONNECTED likewise); a remote range not registered is a
    # NotRegisteredError either way, known by its code, never by its words.
    assert issubclass(errors.NotConnectedError, errors.CLASSES[errors.ERR_NOT_CONNECTED])
    assert issubclass(errors.NotConnectedError, ConnectionError)
    assert issubclass(errors.AlreadyConnectedError, errors.CLASSES[errors.ERR_ALREADY_CONNECTED])
    err = errors.engine_error_for(errors.ENGINE_PARAM_INVALID, "whatever it says", errors.ERR_NOT_REGISTERED)
    assert type(err) is errors.RemoteNotRegisteredError and err.hixl_code == errors.ERR_NOT_REGISTERED
    assert isinstance(err, errors.CLASSES[errors.ERR_NOT_REGISTERED])
    err = errors.engine_error_for(errors.ENGINE_PARAM_INVALID, "Remote memory not registered", errors.ERR_INVALID_ARG)
    assert type(err) is errors.ParamInvalidError


def test_engine_mapping_of_every_code():
    # Each C code's engine status is what its table row says, and its
    # exception class agrees with the engine class of that status where the
    # two mean the same thing.
    for code, status in errors.ENGINE_STATUS_FOR.items():
        assert status in errors.ENGINE_NAMES
        if code == errors.ERR_NOT_CONNECTED:
            assert status == errors.ENGINE_NOT_CONNECTED
        if code == errors.ERR_ALREADY_CONNECTED:
            assert status == errors.ENGINE_ALREADY_CONNECTED
    assert errors.ENGINE_STATUS_FOR[errors.SUCCESS] == errors.ENGINE_SUCCESS


def test_a_row_without_its_class_fails_the_import():
    # hixl.errors checks each row's class name while it builds its tables;
    # a name it does not define is an ImportError naming the row.
    with pytest.raises(ImportError, match="NoSuchError for HIXL_ERR_NEW .-16."):
        errors._class_named("NoSuchError", errors.HixlError, "HIXL_ERR_NEW (-16)")
    with pytest.raises(ImportError, match="EngineError subclass"):
        errors._class_named("InvalidArgumentError", errors.EngineError, "engine status X (1)")
    assert errors._class_named("QueueFullError", errors.HixlError, "row") is errors.QueueFullError
