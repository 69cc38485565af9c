"""DLPack capsules, read and made with ctypes: GPU arrays in and out of the CUDA runtime.

The runtime (``runtime.py``) takes CUDA arrays from other libraries through
:func:`read_capsule`, which describes the ``DLManagedTensor`` a producer's
``__dlpack__()`` returned without consuming it: the capsule keeps its name and
its own destructor frees the tensor once the call is over. ``DeviceArray``
hands its memory to other libraries through :func:`make_capsule`.

A capsule we make must free its tensor from C: a consumer that rejects a
capsule (numpy, for a CUDA one) drops it while its own exception is pending,
and a ctypes callback cannot run then (the call fails, the consumer's error is
lost). So the capsule destructor and the tensor's deleter are a few lines of
LLVM IR, JIT-compiled once, that save the pending exception, drop the one
Python reference the tensor holds (an :class:`_Export`, which keeps the
device memory, shape and strides alive), and restore the exception.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ember.errors import ArgumentError

KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_MANAGED = 13
CUDA_DEVICE_TYPES = (KDL_CUDA, KDL_CUDA_MANAGED)

# DLDataType (code, bits) <-> Ember dtype; lanes are always 1 here.
DTYPES: dict[tuple[int, int], str] = {
    **{(0, b): f"int{b}" for b in (8, 16, 32, 64)},
    **{(1, b): f"uint{b}" for b in (8, 16, 32, 64)},
    **{(2, b): f"float{b}" for b in (16, 32, 64)},
    (4, 16): "bfloat16",
    (6, 8): "bool",
}
_CODE_OF = {name: key for key, name in DTYPES.items()}
_CODE_NAMES = {0: "int", 1: "uint", 2: "float", 3: "opaque handle", 4: "bfloat", 5: "complex"}


class DLDevice(ctypes.Structure):
    """DLPack's ``DLDevice`` struct, laid out as the C header defines it."""

    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    """DLPack's ``DLDataType`` struct (type code, bits, lanes)."""

    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """DLPack's ``DLTensor`` struct: the tensor view exchanged with other frameworks."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),  # NULL: compact row-major
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    """DLPack's ``DLManagedTensor``: a ``DLTensor`` plus the deleter its consumer calls."""

    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),  # void (*)(DLManagedTensor *)
    ]


# Private prototypes, so the shared ctypes.pythonapi functions keep their argtypes.
_API = ctypes.pythonapi
_NAME = b"dltensor"  # a module constant: a capsule keeps a pointer to its name
_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _API)
)
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _API)
)
_new_capsule = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p
)(("PyCapsule_New", _API))
_incref = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_IncRef", _API))
_decref = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_DecRef", _API))


def describe_dtype(code: int, bits: int, lanes: int) -> str:
    """A DLDataType as a dtype name (Ember's where it has one), for checks and messages."""
    name = DTYPES.get((code, bits), f"{_CODE_NAMES.get(code, f'type code {code} ')}{bits}")
    return name if lanes == 1 else f"{name}x{lanes}"


@dataclass(frozen=True)
class CapsuleView:
    """What a DLPack capsule describes; holding it keeps the producer's memory valid."""

    capsule: Any
    device: tuple[int, int]
    pointer: int  # data + byte_offset
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  # in elements; None: compact row-major
    dtype: str  # Ember's name (see describe_dtype)
    itemsize: int


def read_capsule(capsule: Any, where: str) -> CapsuleView:
    """Describe an unconsumed ``dltensor`` capsule without taking ownership of it."""
    if not _is_valid(capsule, _NAME):
        raise ArgumentError(
            f"{where}: __dlpack__() returned {type(capsule).__name__}, not an unconsumed "
            "'dltensor' capsule"
        )
    t = DLManagedTensor.from_address(_get_pointer(capsule, _NAME)).dl_tensor
    ndim = int(t.ndim)
    shape = tuple(int(t.shape[i]) for i in range(ndim))
    strides = tuple(int(t.strides[i]) for i in range(ndim)) if t.strides else None
    code, bits, lanes = int(t.dtype.code), int(t.dtype.bits), int(t.dtype.lanes)
    return CapsuleView(
        capsule=capsule,
        device=(int(t.device.device_type), int(t.device.device_id)),
        pointer=int(t.data or 0) + int(t.byte_offset),
        shape=shape,
        strides=strides,
        dtype=describe_dtype(code, bits, lanes),
        itemsize=max(bits * lanes // 8, 1),
    )


# -- making capsules -----------------------------------------------------------------------
class _Export:
    """Everything an exported tensor points into, alive until its deleter drops it."""

    def __init__(
        self, owner: Any, pointer: int, shape: Sequence[int], dtype: str, device: tuple[int, int]
    ) -> None:
        if dtype not in _CODE_OF:
            raise ArgumentError(f"dtype {dtype} has no DLPack type code")
        code, bits = _CODE_OF[dtype]
        ndim = len(shape)
        self.owner = owner
        strides, step = [], 1
        for n in reversed(shape):
            strides.append(step)
            step *= n
        # Explicit strides: DLPack 1.x consumers may refuse NULL strides.
        self.shape = (ctypes.c_int64 * max(ndim, 1))(*shape)
        self.strides = (ctypes.c_int64 * max(ndim, 1))(*reversed(strides))
        self.managed = m = DLManagedTensor()
        m.dl_tensor.data = pointer
        m.dl_tensor.device = DLDevice(*device)
        m.dl_tensor.ndim = ndim
        m.dl_tensor.dtype = DLDataType(code, bits, 1)
        m.dl_tensor.shape = ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64))
        m.dl_tensor.strides = ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64))
        m.dl_tensor.byte_offset = 0
        m.manager_ctx = id(self)  # the reference the deleter drops is taken in make_capsule
        m.deleter = _hooks().deleter


def make_capsule(
    owner: Any, pointer: int, shape: Sequence[int], dtype: str, device: tuple[int, int]
) -> Any:
    """A ``dltensor`` capsule over ``pointer`` that keeps ``owner`` alive until it is freed.

    A consumer renames the capsule and calls the deleter when done; a capsule
    nobody consumed frees the tensor from its destructor.
    """
    export = _Export(owner, pointer, shape, dtype, device)
    _incref(export)
    try:
        return _new_capsule(ctypes.addressof(export.managed), _NAME, _hooks().destructor)
    except BaseException:
        _decref(export)
        raise


@dataclass(frozen=True)
class _Hooks:
    engine: Any  # the JIT engine owning the code; kept for the life of the process
    deleter: int
    destructor: int


_HOOKS_IR = """
@name = private unnamed_addr constant [9 x i8] c"dltensor\\00"
declare i32 @PyCapsule_IsValid(ptr, ptr)
declare ptr @PyCapsule_GetPointer(ptr, ptr)
declare void @PyErr_Fetch(ptr, ptr, ptr)
declare void @PyErr_Restore(ptr, ptr, ptr)
declare i32 @PyGILState_Ensure()
declare void @PyGILState_Release(i32)
declare void @Py_DecRef(ptr)
declare i32 @Py_IsInitialized()

define void @ember_dlpack_deleter(ptr %m) {
entry:
  %t = alloca ptr
  %v = alloca ptr
  %tb = alloca ptr
  %up = call i32 @Py_IsInitialized()
  %down = icmp eq i32 %up, 0
  br i1 %down, label %done, label %live
live:
  %gil = call i32 @PyGILState_Ensure()
  call void @PyErr_Fetch(ptr %t, ptr %v, ptr %tb)
  %slot = getelementptr i8, ptr %m, i64 MANAGER_CTX_OFFSET
  %ctx = load ptr, ptr %slot
  call void @Py_DecRef(ptr %ctx)
  %t1 = load ptr, ptr %t
  %v1 = load ptr, ptr %v
  %tb1 = load ptr, ptr %tb
  call void @PyErr_Restore(ptr %t1, ptr %v1, ptr %tb1)
  call void @PyGILState_Release(i32 %gil)
  br label %done
done:
  ret void
}

define void @ember_dlpack_capsule_destructor(ptr %capsule) {
entry:
  %valid = call i32 @PyCapsule_IsValid(ptr %capsule, ptr @name)
  %consumed = icmp eq i32 %valid, 0
  br i1 %consumed, label %done, label %unused
unused:
  %m = call ptr @PyCapsule_GetPointer(ptr %capsule, ptr @name)
  call void @ember_dlpack_deleter(ptr %m)
  br label %done
done:
  ret void
}
"""


_HOOKS: list[_Hooks] = []
_HOOKS_LOCK = threading.Lock()


def _hooks() -> _Hooks:
    """The deleter and the capsule destructor, JIT-compiled once per process."""
    with _HOOKS_LOCK:  # two engines would leave one capsule's code to be freed
        if not _HOOKS:
            _HOOKS.append(_compile_hooks())
    return _HOOKS[0]


def _compile_hooks() -> _Hooks:
    # start-up cost: llvmlite.binding loads LLVM (~20 ms), needed only once a capsule is made
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    for name in (
        "PyCapsule_IsValid",
        "PyCapsule_GetPointer",
        "PyErr_Fetch",
        "PyErr_Restore",
        "PyGILState_Ensure",
        "PyGILState_Release",
        "Py_DecRef",
        "Py_IsInitialized",
    ):
        llvm.add_symbol(name, ctypes.cast(getattr(_API, name), ctypes.c_void_p).value)
    ir = _HOOKS_IR.replace("MANAGER_CTX_OFFSET", str(DLManagedTensor.manager_ctx.offset))
    module = llvm.parse_assembly(ir)
    module.verify()
    machine = llvm.Target.from_default_triple().create_target_machine(jit=True)
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    # Never freed: capsules may outlive this module while the interpreter shuts down.
    _incref(engine)
    return _Hooks(
        engine,
        engine.get_function_address("ember_dlpack_deleter"),
        engine.get_function_address("ember_dlpack_capsule_destructor"),
    )


__all__ = [
    "CUDA_DEVICE_TYPES",
    "DTYPES",
    "CapsuleView",
    "describe_dtype",
    "make_capsule",
    "read_capsule",
]
