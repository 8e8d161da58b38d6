"""Build and install the ftcomm package (the torch.distributed backend).

    pip install --no-build-isolation runtime/python     # into the active environment

It needs torch installed in that environment (its headers build the
extension) and libftcomm built in the checkout (`make`); FTCOMM_BUILD_DIR
names another build (default build/release). libftcomm.a is linked into
the extension, so nothing else needs to be on the library path.
"""
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.normpath(os.path.join(here, "..", ".."))
build = os.environ.get("FTCOMM_BUILD_DIR", os.path.join(root, "build", "release"))
libftcomm = os.path.join(build, "lib", "libftcomm.a")
if not os.path.exists(libftcomm):
    raise SystemExit(f"ftcomm: {libftcomm} is missing: run `make` in {root} first (or set FTCOMM_BUILD_DIR)")

setup(
    name="ftcomm",
    version="0.1.0",
    description="Fault-tolerant collectives: the ftcomm backend of torch.distributed",
    packages=["ftcomm"],
    ext_modules=[
        CppExtension(
            "ftcomm._C",
            sources=["ftcomm/csrc/backend.cpp", "ftcomm/csrc/module.cpp", "ftcomm/csrc/recovery.cpp"],
            include_dirs=[os.path.join(root, "runtime", "include")],
            extra_objects=[libftcomm],
            libraries=["websockets", "jansson", "z", "dl", "m"],
            extra_compile_args=["-O2", "-fvisibility=hidden", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror"],
            depends=["ftcomm/csrc/backend.h", os.path.join(root, "runtime", "include", "ftcomm.h"), libftcomm],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    python_requires=">=3.10",
)
