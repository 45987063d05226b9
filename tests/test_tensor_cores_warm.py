"""The warm command and the compile caches' keys, on the CPU.

Most of this needs neither a GPU nor nvmath-python: command-line parsing, the job catalogue, the
cubin cache's key and its lookup (with a stand-in for Numba's code library), the code-generation
cache's key, and the driver loop with a fake compile function. Key stability, the property a warm
image depends on, is tested across two Python processes. The one test that compiles a real
cuBLASDx kernel needs nvmath-python and minutes of CPU, so it is skipped (visibly) unless nvmath is
installed and KERNEL_LAB_SLOW_TESTS=1.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_lab.tensor_cores import codegen_cache, cubin_cache, warm

ROOT = Path(__file__).resolve().parents[1]
HAVE_NVMATH = importlib.util.find_spec("nvmath") is not None


# ---- command line ----------------------------------------------------------------------------

@pytest.mark.parametrize("text, cc", [("sm_90", (9, 0)), ("sm_90a", (9, 0)), ("90", (9, 0)), ("9.0", (9, 0)),
                                      ("sm_100", (10, 0)), ("compute_100", (10, 0)), (" SM_120 ", (12, 0)),
                                      ("10.3", (10, 3))])
def test_parse_arch(text, cc):
    assert warm.parse_arch(text) == cc


@pytest.mark.parametrize("text, message", [("hopper", "cannot read the architecture 'hopper'"),
                                           ("sm_80", "compute capability 9.0 or newer"),
                                           ("sm_9", "cannot read")])
def test_parse_arch_refuses_with_a_message(text, message):
    with pytest.raises(warm.WarmError, match=message):
        warm.parse_arch(text)


def test_parse_archs_and_modules():
    assert warm.parse_archs("sm_90,sm_100,sm_90") == [(9, 0), (10, 0)]
    assert warm.parse_modules("6,07") == ["06", "07"]
    with pytest.raises(warm.WarmError, match="module '05' has no cuBLASDx kernels"):
        warm.parse_modules("05")
    with pytest.raises(warm.WarmError, match="no architecture"):
        warm.parse_archs(" , ")


def test_plan_crosses_jobs_with_architectures():
    one = warm.plan(["--arch", "sm_90"])
    two = warm.plan(["--arch", "sm_90,sm_100", "--processes", "3"])
    assert len(two.jobs) == 2 * len(one.jobs) and two.processes == 3
    assert {cc for _, cc in two.jobs} == {(9, 0), (10, 0)}
    only07 = warm.plan(["--arch", "sm_90", "--modules", "07"])
    assert only07.jobs and all(job.module == "07" for job, _ in only07.jobs)
    fused = warm.plan(["--arch", "sm_90", "--only", "ozaki fused"])
    assert fused.jobs and all(job.method == "fused" for job, _ in fused.jobs)
    two_kinds = warm.plan(["--arch", "sm_90", "--only", "ozaki fused", "--only", "bias_gelu"])
    assert {job.kind for job, _ in two_kinds.jobs} == {"ozaki", "pipeline"}
    assert len(two_kinds.jobs) == len(fused.jobs) + 1


def test_catalogue_holds_the_notebooks_kernels():
    jobs = warm.catalogue()
    labels = [j.label() for j in jobs]
    # 06.1's two pipeline GEMMs at its check shape, 06.2's fused GELU, 07's fused kernel at 8192^3
    assert "06 pipeline identity [128,256,128,256,int8,3] 300x333x200" in labels
    assert "06 pipeline identity [128,256,64,256,float16,3] 300x333x200" in labels
    assert "06 pipeline bias_gelu [128,256,64,256,float16,4,8] 4096x4096x4096" in labels
    assert "07 ozaki fused [128,256,128,256,3] 8192x8192x8192" in labels
    # 06.1's block GEMM and the stage loop of its numbered steps (06.3's chunked implicit GEMM too)
    assert "06 block [128,128,32,256,float16,True]" in labels
    assert "06 async [suggested,3]" in labels and "06 async [plain,3]" in labels
    assert len(set(jobs)) == len(jobs), "a job listed twice would be compiled twice"


def test_catalogue_follows_the_notebooks_block_configs():
    """Every GemmConfig(...) that 06.1-06.3 build is one of the warm-up's block GEMMs (the loaders and
    epilogues the learners write change no cuBLASDx description), so a shipped cache covers them."""
    import ast
    import json

    from kernel_lab.tensor_cores.configs import GemmConfig

    root = Path(__file__).resolve().parents[1] / "solutions" / "06-tensor-cores"
    configs = set()
    for name in ("06.1-tensor-core-gemm.ipynb", "06.2-fused-epilogues.ipynb", "06.3-beyond-one-gemm.ipynb"):
        for cell in json.loads((root / name).read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            for node in ast.walk(ast.parse("".join(cell["source"]))):
                if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "GemmConfig":
                    kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
                    configs.add(GemmConfig(*[ast.literal_eval(a) for a in node.args], **kwargs))
    assert len(configs) >= 6, configs  # fp16 with and without prefetch, bf16, tf32, int8, int4
    in_catalogue = {GemmConfig(**dict(job.config)) for job in warm.catalogue(["06"]) if job.kind == "block"}
    assert configs <= in_catalogue, configs - in_catalogue


def _notebook_pipeline_configs():
    """The PipelineConfig(...) calls of 06.1 and 06.2 (as configs) and 06.4's Space(...) calls."""
    import ast
    import json

    from kernel_lab.tensor_cores import configs as configs_module
    from kernel_lab.tensor_cores.configs import PipelineConfig

    root = Path(__file__).resolve().parents[1] / "solutions" / "06-tensor-cores"
    configs, spaces = set(), []
    for name in ("06.1-tensor-core-gemm.ipynb", "06.2-fused-epilogues.ipynb", "06.4-autotuning.ipynb"):
        for cell in json.loads((root / name).read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            for node in ast.walk(ast.parse("".join(cell["source"]))):
                if not isinstance(node, ast.Call):
                    continue
                called = getattr(node.func, "id", getattr(node.func, "attr", ""))
                if called == "PipelineConfig" and not name.startswith("06.4"):  # 06.4 only tunes: its SPACE
                    kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
                    configs.add(PipelineConfig(*[ast.literal_eval(a) for a in node.args], **kwargs))
                elif called == "Space":
                    spaces.append(configs_module.Space(**{k.arg: ast.literal_eval(k.value) for k in node.keywords}))
    return configs, spaces


def test_catalogue_follows_the_notebooks_pipeline_configs():
    """Every PipelineConfig(...) that 06.1 and 06.2 build is in the warm-up's catalogue, so a
    notebook whose tiles change cannot leave the shipped cache cold (a learner would wait minutes)."""
    from kernel_lab.tensor_cores import configs as configs_module
    from kernel_lab.tensor_cores.configs import PipelineConfig

    configs, spaces = _notebook_pipeline_configs()
    assert len(configs) == 4, configs  # 06.1's int8 and fp16 pipelines and its persistent one, 06.2's
    assert len(spaces) == 1, spaces  # 06.4's SPACE, enumerated with tile_k 64 as the notebook does
    configs |= set(configs_module.enumerate_pipeline_configs("float16", (9, 0), spaces[0], tile_k=(64,)))
    in_catalogue = {PipelineConfig(**dict(job.config)) for job in warm.catalogue(["06"]) if job.kind == "pipeline"}
    assert configs <= in_catalogue, configs - in_catalogue


def test_list_prints_jobs_without_compiling(capsys):
    assert warm.main(["--list", "--arch", "sm_90,sm_100", "--modules", "07"]) == 0
    out = capsys.readouterr().out
    assert "sm_100 07 ozaki fused" in out and "18 jobs" in out


def test_bad_arguments_exit_2_with_the_reason(capsys):
    assert warm.main(["--arch", "sm_70"]) == 2
    assert "9.0 or newer" in capsys.readouterr().err


@pytest.mark.skipif(HAVE_NVMATH, reason="checks the message shown where nvmath-python is missing")
def test_missing_nvmath_is_named(capsys):
    assert warm.main(["--arch", "sm_90"]) == 2
    assert "nvmath-python is not installed" in capsys.readouterr().err


# ---- the driver loop, with a fake compile ------------------------------------------------------

def test_run_reports_every_job_and_counts_failures():
    p = warm.plan(["--arch", "sm_90,sm_100", "--modules", "07", "--only", "2048"])
    seen, lines = [], []

    def fake(spec):
        job, cc, _ = spec
        seen.append((job, cc))
        err = "RuntimeError: boom" if (job.method == "partial" and cc == (10, 0)) else None
        return job, cc, {"total_s": 1.0}, {"hits": 3, "misses": 0}, {"hits": 1}, err

    failed = warm.run(p, compile_one=fake, log=lines.append)
    assert seen == p.jobs and failed == 1
    assert any(line.startswith("FAILED sm_100 07 ozaki partial") and "boom" in line for line in lines)
    assert "5 of 6 compiled" in lines[-1]


# ---- the cubin cache ---------------------------------------------------------------------------

KEY_ARGS = dict(arch="sm_90a", options={"opt": 3, "max_registers": None}, llvm_strs=["define void @k() {}"],
                linked=[("LTOIR:nrt=False", b"\x01\x02"), ("LTOIR:nrt=False", b"\x03")], versions=(("nvjitlink", (13, 0)),))


def test_cubin_key_depends_on_everything_that_goes_into_the_link():
    base = cubin_cache.make_key(**KEY_ARGS)
    assert base == cubin_cache.make_key(**dict(KEY_ARGS, linked=KEY_ARGS["linked"][::-1])), "a set: order-free"
    for change in (dict(arch="sm_100a"), dict(options={"opt": 0, "max_registers": None}),
                   dict(llvm_strs=["define void @k() { ret void }"]),
                   dict(linked=[("LTOIR:nrt=False", b"\x01\x02"), ("LTOIR:nrt=False", b"\x04")]),
                   dict(versions=(("nvjitlink", (13, 1)),))):
        assert cubin_cache.make_key(**dict(KEY_ARGS, **change)) != base, change


def test_cubin_key_ignores_numbas_per_process_function_uids():
    """Numba tags every function name with a per-process counter (``B3v57``): a learner who compiled
    other kernels first has other numbers, and must still find the entry."""
    ir_a = "define void @_ZN6cudapy6kernelB3v57E(){ call @_ZN6cudapy3epiB3v58E() } @_ZN6cudapy3epiB3v58E"
    ir_b = "define void @_ZN6cudapy6kernelB4v312E(){ call @_ZN6cudapy3epiB4v313E() } @_ZN6cudapy3epiB4v313E"
    swapped = "define void @_ZN6cudapy6kernelB3v58E(){ call @_ZN6cudapy3epiB3v57E() } @_ZN6cudapy3epiB3v57E"
    key = dict(KEY_ARGS, llvm_strs=[ir_a], entry="_ZN6cudapy6kernelB3v57E")
    assert cubin_cache.make_key(**key) == cubin_cache.make_key(**dict(key, llvm_strs=[ir_b],
                                                                       entry="_ZN6cudapy6kernelB4v312E"))
    assert cubin_cache.make_key(**key) == cubin_cache.make_key(**dict(key, llvm_strs=[swapped],
                                                                       entry="_ZN6cudapy6kernelB3v58E"))
    # ... but the entry is still which function is the kernel
    assert cubin_cache.make_key(**key) != cubin_cache.make_key(**dict(key, entry="_ZN6cudapy3epiB3v58E"))
    assert cubin_cache.normalise_names(["B3v12x B2v1 B9v12"]) == ["B#v0x B#v1 B9v12"]


def test_cubin_key_ignores_module_ids_and_the_order_of_linked_modules():
    """A library keeps the modules it links in a set (another order in another process), and each
    module's ID carries a uid ("kernel$1"); neither may change the key, but a module's code must."""
    kern = '; ModuleID = "kernel$1"\ndefine void @_ZN1kB2v1E() { call @_ZN3epiB2v2E() call @_ZN3fooB2v3E() }'
    epi = '; ModuleID = "epi$2"\ndefine void @_ZN3epiB2v2E() { ret 1 }'
    foo = '; ModuleID = "foo$3"\ndefine void @_ZN3fooB2v3E() { ret 2 }'
    key = dict(KEY_ARGS, llvm_strs=[kern, epi, foo], entry="_ZN1kB2v1E")
    base = cubin_cache.make_key(**key)
    later = [t.replace("v1E", "v41E").replace("B2v", "B3v").replace("$", "$4") for t in (foo, kern, epi)]
    later = [t.replace("v2E", "v42E").replace("v3E", "v43E") for t in later]
    assert cubin_cache.make_key(**dict(key, llvm_strs=later, entry="_ZN1kB3v41E")) == base
    assert cubin_cache.make_key(**dict(key, llvm_strs=[kern, epi, foo.replace("ret 2", "ret 3")])) != base
    # the kernel calling foo where it called epi is another program, even though the set of texts is
    # the same up to uids
    swapped = kern.replace("@_ZN3epiB2v2E() call @_ZN3fooB2v3E()", "@_ZN3fooB2v3E() call @_ZN3epiB2v2E()")
    assert cubin_cache.make_key(**dict(key, llvm_strs=[swapped, epi, foo])) != base


def _in_fresh_process(code: str) -> list[str]:
    """Run ``code`` in a new interpreter with the two cache modules loaded from their files (not
    through the package, whose import is slow): ``cubin_cache`` and ``codegen_cache`` are bound."""
    prelude = ("import importlib.util, sys\n"
               "def load(name):\n"
               f"    spec = importlib.util.spec_from_file_location(name, {str(ROOT / 'utilities' / 'kernel_lab' / 'tensor_cores')!r} + '/' + name + '.py')\n"
               "    m = sys.modules[name] = importlib.util.module_from_spec(spec)  # dataclasses look the module up\n"
               "    spec.loader.exec_module(m); return m\n"
               "cubin_cache, codegen_cache = load('cubin_cache'), load('codegen_cache')\n")
    env = dict(os.environ, PYTHONHASHSEED="random")
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, env=env,
                          check=True).stdout.strip().splitlines()


def test_keys_are_the_same_in_another_process():
    """What makes a warm image useful: a learner's process computes the same keys."""
    description = ("function", ("descriptor", ("cublasdx_set_operator_int64", (3, 90))), 2, ())
    cache = object.__new__(codegen_cache.CodegenCache)
    cache.versions = ("nvmath-python==1.0.0", (0, 3, 2))
    code = (f"print(cubin_cache.make_key(**{KEY_ARGS!r}))\n"
            "c = object.__new__(codegen_cache.CodegenCache)\n"
            f"c.versions = {cache.versions!r}\n"
            f"print(c.key('device-functions', {description!r}))")
    cubin_key, codegen_key = _in_fresh_process(code)[-2:]
    assert cubin_key == cubin_cache.make_key(**KEY_ARGS)
    assert codegen_key == cache.key("device-functions", description)


class _FakeLibrary:
    """What the cubin cache reads of Numba's CUDACodeLibrary."""

    links = 0

    def __init__(self, ir="define void @_ZN6cudapy1kB3v10E() {}", linked=(b"cublasdx",), entry="_ZN6cudapy1kB3v10E"):
        self._cubin_cache, self._linkerinfo_cache = {}, {}
        self._linking_files = {_Code(d) for d in linked}
        self._lto, self.needs_cudadevrt = True, False
        self._nvvm_options, self._max_registers = {"opt": 3}, None
        self._entry_name = self.name = entry
        self.llvm_strs = [ir]

    def _ensure_cc(self, cc):
        return cc or (9, 0, "a")

    def get_cubin(self, cc=None):
        type(self).links += 1
        return _Code(b"CUBIN for " + self.llvm_strs[0].encode())


class _Code:
    def __init__(self, data):
        self.data = self.code = data


def test_cubin_cache_links_once_then_loads_from_disk(tmp_path, monkeypatch):
    class Lib(_FakeLibrary):
        links = 0

    cache = cubin_cache.CubinCache(tmp_path / "cubin")
    cache.versions = (("test", 1),)
    cubin_cache.install_on(Lib, cache)
    monkeypatch.setattr(cubin_cache, "_as_object_code", lambda data, name: ("loaded", data))
    first = Lib().get_cubin()
    assert Lib.links == 1 and cache.misses == 1 and first.code.startswith(b"CUBIN")
    again = Lib().get_cubin()  # a new library (another process would be the same): no link
    assert Lib.links == 1 and cache.hits == 1 and again == ("loaded", first.code)
    renumbered = Lib(ir="define void @_ZN6cudapy1kB3v99E() {}", entry="_ZN6cudapy1kB3v99E")
    renumbered.get_cubin()  # the same kernel compiled in a process that numbered functions differently
    assert Lib.links == 1 and renumbered._entry_name == "_ZN6cudapy1kB3v10E", "looked up by the cubin's name"
    Lib(ir="define void @_ZN6cudapy5otherB3v10E() {}", entry="_ZN6cudapy5otherB3v10E").get_cubin()
    Lib().get_cubin(cc=(10, 0, "a"))
    assert Lib.links == 3, "another kernel or another architecture is linked, not served a wrong cubin"


def test_cubin_cache_reads_a_read_only_warm_cache(tmp_path, monkeypatch):
    class Lib(_FakeLibrary):
        links = 0

    shipped = cubin_cache.CubinCache(tmp_path / "image" / "cubin")
    shipped.versions = (("test", 1),)
    cubin_cache.install_on(Lib, shipped)
    monkeypatch.setattr(cubin_cache, "_as_object_code", lambda data, name: ("loaded", data))
    Lib().get_cubin()  # fills the image's cache

    class Learner(_FakeLibrary):
        links = 0

    mine = cubin_cache.CubinCache(tmp_path / "home" / "cubin")
    mine.versions = shipped.versions
    cubin_cache.install_on(Learner, mine)
    monkeypatch.setenv("KERNEL_LAB_WARM_CACHE", str(tmp_path / "image"))
    assert Learner().get_cubin()[0] == "loaded" and Learner.links == 0


def test_libraries_without_linked_code_are_left_alone(tmp_path):
    lib = _FakeLibrary(linked=())
    assert cubin_cache.CubinCache(tmp_path).key_for(lib, (9, 0, "a")) is None


def test_link_cc_matches_numba():
    assert cubin_cache.link_cc((9, 0)) == (9, 0, "a")
    assert cubin_cache.link_cc((10, 0)) == (10, 0, "a")
    assert cubin_cache.link_cc((8, 6)) == (8, 6, "")
    assert cubin_cache.arch_name((9, 0, "a")) == "sm_90a"


def test_tensor_uids_come_from_descriptions_not_from_the_process():
    """nvmath names a layout type after its tensor's UID (mangled into the kernel's IR), and
    libmathdx numbers tensors per process: the cache reports a UID derived from the description."""
    a, b = "3f" + "1" * 62, "3f" + "2" * 62
    assert codegen_cache.stable_uid(a) == codegen_cache.stable_uid(a) != codegen_cache.stable_uid(b)
    assert codegen_cache.stable_uid(a) >= codegen_cache._VIRTUAL_UID_BASE  # not a number libmathdx hands out
    assert codegen_cache.stable_uid("f" * 64) < 1 << 63  # an int64 trait


def test_codegen_store_falls_back_to_the_warm_cache(tmp_path, monkeypatch):
    image = codegen_cache._Store(tmp_path / "image" / "mathdx-codegen")
    image.put("ab" + "0" * 62, {"kind": "trait", "value": 7})
    mine = codegen_cache._Store(tmp_path / "home" / "mathdx-codegen")
    assert mine.get("ab" + "0" * 62) is None
    monkeypatch.setenv("KERNEL_LAB_WARM_CACHE", str(tmp_path / "image"))
    assert mine.get("ab" + "0" * 62)["value"] == 7


# ---- a real compile (nvmath-python, minutes of CPU) ----------------------------------------------

@pytest.mark.skipif(not HAVE_NVMATH or not os.environ.get("KERNEL_LAB_SLOW_TESTS"),
                    reason="needs nvmath-python (pip install 'nvmath-python[cu13,dx]')" if not HAVE_NVMATH else
                    "compiles cuBLASDx code for minutes: set KERNEL_LAB_SLOW_TESTS=1")
def test_a_second_process_finds_the_warm_entries(tmp_path):
    env = dict(os.environ, KERNEL_LAB_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT / "utilities"))
    job = "06 pipeline identity [128,128,64,128,int8,3] 300x333x200"
    subprocess.run([sys.executable, "-m", "kernel_lab.tensor_cores.warm", "--arch", "sm_90", "--only", job],
                   env=env, check=True)
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "profile_compile.py"), "--job", job],
                         env=env, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["codegen_cache"]["misses"] == 0 and result["cubin_cache"]["hits"] == 1


def test_cubin_cache_stays_off_under_the_simulator():
    """Without a GPU backend there is no code library to wrap: enable() says so with None."""
    from kernel_lab.environment import on_simulator

    if not on_simulator():
        pytest.skip("a GPU backend is active")
    assert cubin_cache.enable() is None


def test_kernel_lab_warm_subcommand(capsys):
    from kernel_lab import cli

    assert cli.main(["warm", "--list", "--arch", "sm_100", "--modules", "07"]) == 0
    assert "sm_100 07 ozaki" in capsys.readouterr().out



@pytest.mark.skipif(not HAVE_NVMATH, reason="needs nvmath-python (the cu13 extra)")
def test_pretend_gpu_answers_as_a_gpu_process_does():
    """The code-generation cache keys hold the target SM, and nvmath asks a real Hopper for
    "9.0a": a warm-up that pretended "9.0" filled a cache no GPU process ever hit (06.1 then
    regenerated every pipeline function, 216 s for one cell on an H100). Run where the warm-up
    runs: a process with Numba's GPU target and the stand-in driver."""
    from kernel_lab.tensor_cores import offline

    script = (
        "from kernel_lab.tensor_cores import offline\n"
        "import nvmath.device.common as common, nvmath.device.common_cuda as cc\n"
        "for want in [(9, 0), (10, 0), (8, 9)]:\n"
        "    offline.pretend_gpu(want)\n"
        "    got = cc.get_default_code_type().cc\n"
        "    assert common.get_current_device_cc() == got\n"
        "    print(got.major, got.minor, repr(got.arch))\n")
    env = offline.stand_in_environment(PYTHONPATH=str(ROOT / "utilities"))
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split("\n")[:3] == ["9 0 'a'", "10 0 'a'", "8 9 ''"]


def test_the_ratios_script_times_the_notebooks_pipelines():
    """scripts/module06_ratios.py measures issue 10's goals on the pipelines the notebooks build (06.1's
    int8 and fp16 tiles, 06.2's persistent fp16) and the int8 tiles made persistent the same way."""
    import sys

    from kernel_lab.tensor_cores.configs import PipelineConfig

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import module06_ratios as ratios

    configs, _ = _notebook_pipeline_configs()
    timed = {PipelineConfig(**c) for c in (ratios.FP16_06, ratios.INT8_06, ratios.FP16_P8)}
    # 06.1's Exercise 5 runs the learner's kernel on the fp16 tiles made persistent (three stages);
    # the package's persistent fp16 pipeline is 06.2's, timed above at four stages
    learners = PipelineConfig(**{**ratios.FP16_06, "persistent_group_m": 8})
    assert timed == configs - {learners}
    assert PipelineConfig(**ratios.INT8_P8) == PipelineConfig(**{**ratios.INT8_06, "persistent_group_m": 8})
