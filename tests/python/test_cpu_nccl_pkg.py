"""The package's NCCL and GPU preconditions without a GPU: the loaded NCCL must be the release weave
was built against (checked when a Communicator is created), a missing GPU is reported as such, the
examples skip cleanly, and the wheel's metadata names the license."""
import glob
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import weave
from conftest import GPU_SKIP

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_nccl_versions_report_the_match():
    v = weave.nccl_versions()
    assert v["match"] == (v["build"] == v["runtime"])
    assert v["match"], f"this process loaded NCCL {v['runtime']}, weave was built against {v['build']}"


@pytest.mark.skipif(not GPU_SKIP, reason="checks the no-GPU path")
def test_create_local_without_gpu_gives_the_reason_not_an_nccl_error():
    with pytest.raises(weave.Error) as e:
        weave.Communicator.create_local([0])
    assert e.value.status == weave.Status.NO_DEVICE, str(e.value)
    assert "unhandled cuda error" not in str(e.value)
    if not weave.devices():
        assert e.value.message == weave.no_gpu_reason()


def _fake_nccl_version(tmp_path, code):
    """A library whose ncclGetVersion reports `code`, preloaded ahead of the real NCCL: the process
    then looks like one that loaded another NCCL release (torch's, say) first."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in NCCL version library")
    src = tmp_path / "fake_nccl_version.c"
    src.write_text(f"int ncclGetVersion(int* v) {{ *v = {code}; return 0; }}\n")
    lib = tmp_path / "libfake_nccl_version.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return str(lib)


def test_another_nccl_release_is_refused_at_communicator_creation(tmp_path):
    built = weave.nccl_build_version
    major, minor, patch = (int(x) for x in built.split("."))
    other = major * 10000 + minor * 100 + patch + 1  # the next patch: refused too (exact release)
    other_text = f"{major}.{minor}.{patch + 1}"
    lib = _fake_nccl_version(tmp_path, other)
    script = textwrap.dedent("""
        import weave
        print("versions", weave.nccl_versions())
        try:
            weave.Communicator.create_local([0])
        except weave.Error as e:
            print("status", e.status.name)
            print("message", e.message)
    """)
    env = dict(os.environ, LD_PRELOAD=lib)
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120,
                       cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert f"'runtime': '{other_text}'" in r.stdout and "'match': False" in r.stdout, r.stdout
    # Refused before the GPU check: the same error on machines with and without a GPU.
    assert "status UNSUPPORTED" in r.stdout, r.stdout
    assert f"built against NCCL {built} but this process loaded NCCL {other_text}" in r.stdout, r.stdout
    assert "NCCL_ROOT" in r.stdout, r.stdout


@pytest.mark.skipif(not GPU_SKIP, reason="checks the no-GPU path")
@pytest.mark.parametrize("example", sorted(glob.glob(os.path.join(ROOT, "examples", "python", "*.py"))),
                         ids=os.path.basename)
def test_python_examples_skip_cleanly_without_gpu(example):
    # Exit 77 ("skipped") with the reason, as the C++ examples do (examples/gemm.cpp: "GPU part skipped: ...").
    r = subprocess.run([sys.executable, example], capture_output=True, text=True, timeout=120)
    assert r.returncode == 77, r.stdout + r.stderr
    assert r.stdout.startswith("GPU part skipped: ") and weave.no_gpu_reason() in r.stdout, r.stdout
    assert r.stderr == "", r.stderr


@pytest.mark.skipif(not GPU_SKIP, reason="checks the no-GPU path")
def test_the_async_tp_bench_skips_cleanly_and_checks_its_arguments_first():
    # scripts/bench_torch_async_tp.py: exit 77 with the reason where it cannot run (no torch, no
    # GPUs, not under torchrun), exit 2 naming the option for a bad argument, before anything else.
    script = os.path.join(ROOT, "scripts", "bench_torch_async_tp.py")
    r = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 77, r.stdout + r.stderr
    assert r.stdout.startswith("bench_torch_async_tp: skipped: "), r.stdout
    for bad, says in ((["--quant", "fp4"], "--quant fp4: expected bf16 and/or ptpc"),
                      (["--tokens", "1k"], "--tokens '1k': expected integers"),
                      (["--iters", "0"], "--iters must be >= 1")):
        r = subprocess.run([sys.executable, script, *bad], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and says in r.stderr, (bad, r.stdout + r.stderr)


@pytest.mark.skipif(not GPU_SKIP, reason="checks the no-GPU path")
def test_the_python_host_bench_skips_cleanly_and_checks_its_arguments_first():
    # scripts/bench_python_host.py: exit 77 with the reason without a GPU (or torch), exit 2 naming
    # the option for a bad argument, before anything else.
    script = os.path.join(ROOT, "scripts", "bench_python_host.py")
    r = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 77 and r.stdout.startswith("bench_python_host: skipped: "), r.stdout + r.stderr
    for bad, says in ((["--quant", "fp4"], "--quant fp4: expected bf16"), (["--m", "1,x"], "--m '1,x': expected integers"),
                      (["--calls", "0"], "--calls must be >= 1")):
        r = subprocess.run([sys.executable, script, *bad], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and says in r.stderr, (bad, r.stdout + r.stderr)


def test_package_metadata_names_the_license():
    from importlib import metadata

    try:
        meta = metadata.metadata("weave")
    except metadata.PackageNotFoundError:
        pytest.skip("weave is not installed as a distribution here (running from a source tree)")
    assert meta["License"] == "BSD-3-Clause"
    assert "License :: OSI Approved :: BSD License" in (meta.get_all("Classifier") or [])
    files = [str(f) for f in (metadata.files("weave") or [])]
    assert any(f.endswith(".dist-info/LICENSE") or "/licenses/LICENSE" in f for f in files), files


def test_the_package_holds_one_libweave():
    # A wheel is a zip: a soname chain (libweave.so -> .so.0.1 -> .so.0.1.0) would land as three
    # full copies. One file, which the extension loads from beside itself ($ORIGIN).
    pkg = os.path.dirname(weave.__file__)
    libs = sorted(os.path.basename(p) for p in glob.glob(os.path.join(pkg, "libweave*")))
    assert libs == ["libweave.so"], libs
    assert weave._weave.__file__.startswith(pkg)


def test_llama_example_cuts_its_cache_back_by_a_negative_crop():
    # examples/python/llama_on_weave.py times every decode step at the prompt's length: it drops the
    # tokens past it with crop(-n) (transformers 5.17 deprecates crop(positive length)), and leaves a
    # cache of that length alone (crop(0) would mean "drop nothing" in 5.x but "keep 0" in 4.x).
    sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
    try:
        import llama_on_weave
    finally:
        sys.path.pop(0)

    class Cache:
        def __init__(self, n):
            self.n, self.crops = n, []

        def get_seq_length(self):
            return self.n

        def crop(self, k):
            self.crops.append(k)
            self.n = self.n + k if k < 0 else k

    c = Cache(515)
    llama_on_weave.cut_to(c, 512)
    assert c.crops == [-3] and c.n == 512
    llama_on_weave.cut_to(c, 512)
    assert c.crops == [-3], "a cache already at the length is left alone"
