"""Programs that attack the sandbox: each is contained (reward 0), changes nothing outside it, leaves no
process behind, and the env grades the next (honest) program as before.

Each attack program prints the right answer only if its attack worked, so reward 0 means the attack
failed. The problems' expected outputs cannot be computed from their inputs: a pass would have to
come from reading them.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from agentcollapse import envs
from agentcollapse import sandbox as sandbox_module
from agentcollapse.envs.deepcoder.problems import CodeProblem
from agentcollapse.sandbox import ERROR, OK, OUTPUT_LIMIT, TIMEOUT, Limits, Sandbox, SandboxUnavailable
from agentcollapse.sandbox.child import _UID_BASE

pytestmark = pytest.mark.xdist_group("sandbox")  # one worker: the leftover checks see only our processes

REPO = Path(__file__).resolve().parents[2]
LIMITS = {"cpu_seconds": 1.0, "wall_seconds": 2.0, "memory_mb": 256, "output_bytes": 1 << 16}
SECRET = "zq-expected-7391-kx"  # the hidden expected output: no program can compute it


@functools.cache
def _layers() -> dict[str, bool]:
    return Sandbox("best_effort").probe()


needs_all_layers = pytest.mark.skipif(
    not all(_layers().values()), reason=f"this machine lacks sandbox layers: {[k for k, v in _layers().items() if not v]}"
)


def _leftovers() -> list[str]:
    """Live processes of the sandboxes this process started: in a runner's process group, or (as root)
    running as one of their candidates' uids. Other processes' sandboxes (a training run) do not count."""
    runners = set(sandbox_module.STARTED)
    uids = {_UID_BASE + pid for pid in runners}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            status = (entry / "status").read_text()
        except OSError:
            continue
        state, _, pgid = stat.rsplit(")", 1)[1].split()[:3]
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        uid = int(fields.get("Uid", "0").split()[0])
        if state != "Z" and (int(pgid) in runners or uid in uids):
            found.append(f"{entry.name} uid={uid} pgid={pgid}")
    return found


def _assert_no_leftovers() -> None:
    deadline = time.monotonic() + 3.0
    while _leftovers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _leftovers() == []


def _env(tests=(("1 2\n", SECRET + "\n"), ("3 4\n", SECRET + "-2\n")), call=None):
    env = envs.make("deepcoder", sandbox="strict", **LIMITS)
    env.reset(0)
    env.problem = CodeProblem("Print the hidden answer .", tuple(tests), tuple(tests[:1]), call=call, kind="file", source="test")
    return env


def _attack(program: str, **kw) -> tuple[float, dict]:
    """Grade ``program``; then an honest program on a fresh problem still gets reward 1."""
    started = time.monotonic()
    env = _env(**kw)
    _, reward, done, info = env.step(program)
    assert done and reward == 0.0 and not info["success"], info
    honest = _env(tests=(("1 2\n", "3\n"),))
    assert honest.step("a, b = map(int, input().split())\nprint(a + b)")[1] == 1.0
    _assert_no_leftovers()
    assert time.monotonic() - started < 15
    return reward, info


@needs_all_layers
def test_all_layers_hold_here():
    sandbox = Sandbox("strict")
    assert sandbox.probe() == dict.fromkeys(sandbox.layers, True)
    (run,) = sandbox.run("import os\nprint(sorted(os.listdir('/')), os.getcwd(), sorted(os.environ))", [""])
    listing = run.stdout
    assert run.status == OK and "work" in listing and "/work" in listing
    assert "'home'" not in listing and "'proc'" not in listing and "'etc'" not in listing and "'tmp'" not in listing


@needs_all_layers
def test_infinite_loop_is_stopped_by_the_cpu_limit():
    started = time.monotonic()
    _, info = _attack("while True:\n    pass")
    assert "timeout" in info["reason"]
    assert time.monotonic() - started < 6


@needs_all_layers
def test_sleeping_forever_is_stopped_by_the_wall_clock():
    _, info = _attack("import time\ntime.sleep(3600)")
    assert "timeout" in info["reason"]


@needs_all_layers
def test_fork_bomb_is_capped_and_cleaned_up():
    _attack("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass")
    # The cap itself: a program that forks as often as it can gets at most `processes` processes.
    sandbox = Sandbox("strict", Limits(cpu_seconds=1, wall_seconds=2))
    code = (
        "import os, time\nn = 0\nfor _ in range(100):\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
        "    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n    n += 1\nprint(n)"
    )
    (run,) = sandbox.run(code, [""])
    assert run.status == OK and int(run.stdout) < sandbox.limits.processes
    _assert_no_leftovers()


@needs_all_layers
def test_setsid_children_do_not_survive():
    sandbox = Sandbox("strict", Limits(cpu_seconds=1, wall_seconds=2))
    code = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\nprint('parent done')"
    (run,) = sandbox.run(code, [""])
    assert run.status == OK and run.stdout.strip() == "parent done"
    _assert_no_leftovers()


@needs_all_layers
def test_allocating_20_gb_fails():
    _, info = _attack("x = bytearray(20 * 1024 ** 3)\nprint('zq-expected-7391-kx')")
    assert "error" in info["reason"]


@needs_all_layers
def test_printing_1_gb_is_cut_off():
    env = _env()
    started = time.monotonic()
    _, reward, _, info = env.step("import sys\nchunk = 'x' * 65536\nfor _ in range(16384):\n    sys.stdout.write(chunk)")
    assert reward == 0.0 and env.last_runs[0].status == OUTPUT_LIMIT
    assert len(env.last_runs[0].stdout) <= LIMITS["output_bytes"]
    assert time.monotonic() - started < 5
    _attack("import sys\nchunk = 'x' * 65536\nfor _ in range(16384):\n    sys.stdout.write(chunk)")


@needs_all_layers
@pytest.mark.parametrize("where", ["tests", "repository", "home", "tmp"])
def test_writing_outside_the_sandbox_fails(where, tmp_path):
    target = {
        "tests": Path(__file__).parent,
        "repository": REPO,
        "home": Path(os.path.expanduser("~")),
        "tmp": tmp_path,
    }[where] / f"sandbox-attack-{os.getpid()}-{where}.py"
    assert not target.exists()
    program = f"open({str(target)!r}, 'w').write('pwned')\nprint({SECRET!r})"
    _attack(program)
    assert not target.exists()


@needs_all_layers
def test_expected_outputs_on_disk_are_out_of_reach(tmp_path):
    # The data file the env loaded holds the expected outputs; the program looks for it everywhere.
    data = tmp_path / "problems.jsonl"
    data.write_text(json.dumps({"problem": "Print the hidden answer .", "tests": [{"input": "1 2\n", "output": SECRET + "\n"}]}) + "\n")
    env = envs.make("deepcoder", sandbox="strict", data_path=str(data), **LIMITS)
    env.reset(0)
    program = (
        "import os, re\n"
        f"paths = [{str(data)!r}]\n"
        "for root, dirs, files in os.walk('/'):\n"
        "    paths += [os.path.join(root, f) for f in files if f.endswith('.jsonl')]\n"
        "for p in paths:\n"
        "    try:\n"
        "        m = re.search(r'zq-expected-[0-9]+-kx', open(p).read())\n"
        "    except OSError:\n"
        "        continue\n"
        "    if m:\n"
        "        print(m.group(0))\n"
        "        break"
    )
    _, reward, _, info = env.step(program)
    assert reward == 0.0 and env.last_runs[0].stdout == ""
    _assert_no_leftovers()


@needs_all_layers
def test_expected_outputs_in_the_graders_memory_are_out_of_reach():
    grader = os.getpid()
    program = (
        "import gc, os, re\n"
        "pat = re.compile(rb'zq-expected-[0-9]+-kx')\n"
        "for o in gc.get_objects():\n"
        "    if isinstance(o, (str, bytes)) and pat.search(o if isinstance(o, bytes) else o.encode()):\n"
        "        print(pat.search(o if isinstance(o, bytes) else o.encode()).group(0).decode()); raise SystemExit\n"
        f"for pid in ({grader}, os.getppid(), 1):\n"
        "    for name in ('mem', 'environ', 'cmdline'):\n"
        "        try:\n"
        "            data = open(f'/proc/{pid}/{name}', 'rb').read(1 << 24)\n"
        "        except OSError:\n"
        "            continue\n"
        "        if pat.search(data):\n"
        "            print(pat.search(data).group(0).decode()); raise SystemExit"
    )
    reward, info = _attack(program)
    assert reward == 0.0 and "zq-expected-" not in json.dumps(info, default=str)  # nothing found, nothing shown


@needs_all_layers
def test_environment_variables_of_the_parent_are_not_visible(monkeypatch):
    monkeypatch.setenv("AGENTCOLLAPSE_FAKE_SECRET", SECRET)
    program = (
        "import os\nprint(os.environ.get('AGENTCOLLAPSE_FAKE_SECRET', 'none'))\n"
        "for p in ('/proc/self/environ', '/proc/1/environ'):\n"
        "    try:\n        print(open(p).read())\n    except OSError:\n        pass"
    )
    env = _env()
    env.step(program)
    assert SECRET not in env.last_runs[0].stdout and env.last_runs[0].stdout.strip() == "none"
    _attack(program)


@needs_all_layers
def test_no_network_even_to_localhost():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.1)
    port = server.getsockname()[1]
    connected, stop = [], threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            connected.append(True)
            conn.sendall((SECRET + "\n").encode())
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    program = f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)\nprint(s.recv(100).decode().strip())"
    try:
        _attack(program)
        assert connected == []
    finally:
        stop.set()
        thread.join(timeout=2)
        server.close()


@needs_all_layers
def test_killing_the_parent_or_the_grader_fails():
    grader = os.getpid()
    for target in ("os.getppid()", str(grader), "1", "-1"):
        program = f"import os, signal\ntry:\n    os.kill({target}, signal.SIGKILL)\nexcept OSError:\n    pass\nprint('still here')"
        _attack(program)
    assert os.getpid() == grader  # this process (the grader) is alive


@needs_all_layers
def test_exiting_early_or_patching_the_checker_passes_nothing():
    rewards = [_attack("import sys\nsys.exit(0)")[0]]
    forged = json.dumps({"i": 1, "status": "ok", "stdout": SECRET + "-2\n", "stderr": "", "seconds": 0})
    patch = (
        "import sys, json\n"
        "try:\n    import agentcollapse.sandbox.compare as s\n    s.outputs_match = lambda *a, **k: True\nexcept ImportError:\n    pass\n"
        "import builtins\nbuiltins.print = lambda *a, **k: None\n"
        f"sys.stdout.write({forged!r} + '\\n')\n"
        'import os\nfor fd in range(3, 20):\n    try:\n        os.write(fd, b\'{"i": 0, "status": "ok", "stdout": "x"}\\n\')\n    except OSError:\n        pass\n'
        "sys.exit(0)"
    )
    rewards.append(_attack(patch)[0])
    rewards.append(
        _attack(
            "def solve(a, b):\n    import json\n    json.dumps = lambda v: 'true'\n    return 0",
            tests=(("[1, 2]", json.dumps(SECRET)),),
            call="solve",
        )[0]
    )
    assert rewards == [0.0, 0.0, 0.0]  # a pass comes from the outputs alone


def test_without_namespaces_strict_refuses_and_best_effort_says_so_once(caplog):
    with pytest.raises(SandboxUnavailable, match="best_effort"):
        Sandbox("strict", namespaces=False).probe()
    sandbox = Sandbox("best_effort", Limits(cpu_seconds=1, wall_seconds=2), namespaces=False)
    with caplog.at_level(logging.WARNING, logger="agentcollapse.sandbox"):
        layers = sandbox.probe()
        runs = sandbox.run("while True:\n    pass", [""]) + sandbox.run("print(int(input()) * 2)", ["21"])
    assert not layers["net_namespace"] and not layers["pid_namespace"] and not layers["mount_namespace"]
    assert layers["rlimits"] and layers["session"] and layers["clean_env"]
    assert [r.status for r in runs] == [TIMEOUT, OK] and runs[1].stdout == "42\n"
    warnings = [r.message for r in caplog.records if "running without" in r.message]
    assert len(warnings) == 1 and "net_namespace" in warnings[0]
    _assert_no_leftovers()


_SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")
_AS_USER = """
import importlib.util, json, os, sys
sys.path.insert(0, os.path.dirname(sys.argv[2]))  # pyseccomp, copied there
folder = sys.argv[1]  # the package alone, loaded from its folder (nobody cannot read the venv)
spec = importlib.util.spec_from_file_location("sandbox_as_user", os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])
m = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = m
spec.loader.exec_module(m)
os.environ["FAKE_SECRET"] = "s3cret-as-user"
sb = m.Sandbox("strict", m.Limits(cpu_seconds=1, wall_seconds=2))
out = {"uid": os.getuid(), "layers": sb.probe()}
fork = "import os, time\\nn = 0\\nfor _ in range(100):\\n    try:\\n        pid = os.fork()\\n    except OSError:\\n        break\\n"
fork += "    if pid == 0:\\n        time.sleep(30)\\n        os._exit(0)\\n    n += 1\\nprint(n)"
out["forks"] = sb.run(fork, [""])[0].stdout.strip()
out["env"] = sb.run("import os; print(os.environ.get('FAKE_SECRET'))", [""])[0].stdout.strip()
out["write"] = sb.run("open(%r, 'w').write('x')" % sys.argv[2], [""])[0].status
out["escape"] = sb.run("import os\\nos.mkdir('x')\\nos.chroot('x')\\nprint('escaped')", [""])[0].stdout.strip()
out["mount"] = sb.run("import ctypes\\nprint(ctypes.CDLL(None).mount(b'tmpfs', b'/work', b'tmpfs', 0, None))", [""])[0].stdout.strip()
kill = "import os, signal\\nos.kill(%s, signal.SIGINT)\\nprint('alive')"
out["sigint_init"] = [(r.status, r.stdout.strip()) for r in sb.run(kill % "1", ["", ""])]
out["sigint_parent"] = [r.status for r in sb.run(kill % "os.getppid()", ["", ""])]
print(json.dumps(out))
"""


@needs_all_layers
@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or _SYSTEM_PYTHON is None,
    reason="needs root (to become nobody), setpriv and a system python3",
)
def test_as_an_ordinary_user_every_layer_holds():
    """The same guarantees for an ordinary user (nobody here): user namespaces stand in for root."""
    import subprocess
    import tempfile

    import pyseccomp

    sandbox_folder = str(Path(sandbox_module.__file__).resolve().parent)
    outside = Path(tempfile.mkdtemp(prefix="sandbox-as-user-"))
    try:
        outside.chmod(0o777)
        shutil.copy(pyseccomp.__file__, outside / "pyseccomp.py")
        target = outside / "pwned"
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]
        proc = subprocess.run(
            [*cmd, _SYSTEM_PYTHON, "-c", _AS_USER, sandbox_folder, str(target)], capture_output=True, text=True, timeout=60
        )
        if proc.returncode != 0 and ("Permission denied" in proc.stderr or "user namespace" in proc.stderr):
            pytest.skip(f"nobody cannot run the sandbox here: {proc.stderr.strip().splitlines()[-1]}")
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["uid"] == 65534 and all(out["layers"].values()), out
        assert int(out["forks"]) < 8 and out["env"] == "None" and out["write"] == "error" and not target.exists()
        assert out["escape"] == "" and out["mount"] == "-1"
        # The harness survives SIGINT from its candidates (as the same uid): as init it ignores it.
        assert out["sigint_init"] == [["ok", "alive"]] * 2 and out["sigint_parent"] == ["ok"] * 2, out
    finally:
        shutil.rmtree(outside, ignore_errors=True)


# Each call the syscall filter denies, made as a program would with arguments that work without the
# filter: (name, arguments, the errno the filter answers). Numbers come from libseccomp, for this machine.
_KEY_SPEC_SESSION, _IPC_CREAT, _CLONE_NEWUSER, _SIGCHLD = -3, 0o1000, 0x10000000, 17
_DENIED_CALLS = [
    ("unshare", (_CLONE_NEWUSER,), "EPERM"),
    ("setns", (0, 0), "EPERM"),
    ("mount", (b"none", b"/work", b"tmpfs", 0, 0), "EPERM"),
    ("clone", (_CLONE_NEWUSER | _SIGCHLD, 0, 0, 0, 0), "EPERM"),
    ("clone3", (0, 0), "ENOSYS"),
    ("keyctl", (1, 0), "EPERM"),  # KEYCTL_JOIN_SESSION_KEYRING: a fresh anonymous keyring
    ("add_key", (b"user", b"zq", b"v", 1, _KEY_SPEC_SESSION), "EPERM"),
    ("request_key", (b"user", b"zq", 0, _KEY_SPEC_SESSION), "EPERM"),
    ("shmget", (0, 1 << 20, _IPC_CREAT | 0o600), "EPERM"),
    ("msgget", (0, _IPC_CREAT | 0o600), "EPERM"),
    ("semget", (0, 1, _IPC_CREAT | 0o600), "EPERM"),
    ("memfd_create", (b"x", 0), "EPERM"),
    ("memfd_secret", (0,), "EPERM"),
    ("io_uring_setup", (1, "params"), "EPERM"),
    ("userfaultfd", (0,), "EPERM"),
    ("perf_event_open", ("attr", 0, -1, -1, 0), "EPERM"),
    ("bpf", (0, 0, 0), "EPERM"),
    ("ptrace", (0, 0, 0, 0), "EPERM"),  # PTRACE_TRACEME
    ("process_vm_readv", ("self", 0, 0, 0, 0, 0), "EPERM"),
    ("socket", (2, 1, 0), "EAFNOSUPPORT"),  # AF_INET
    ("socket", (10, 2, 0), "EAFNOSUPPORT"),  # AF_INET6
    ("socket", (16, 3, 12), "EAFNOSUPPORT"),  # AF_NETLINK, NETLINK_NETFILTER (nf_tables)
    ("socket", (40, 1, 0), "EAFNOSUPPORT"),  # AF_VSOCK: no network namespace covers it
    ("socket", (17, 3, 0), "EAFNOSUPPORT"),  # AF_PACKET
    ("socketpair", (2, 1, 0, "fds"), "EAFNOSUPPORT"),
]
_TRY_CALLS = r"""
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(256)
special = {"params": buf, "attr": buf, "fds": buf, "self": os.getpid()}
out = []
for name, nr, args, in CALLS:
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[special[a] if isinstance(a, str) else ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    e = ctypes.get_errno()
    if r == 0 and name == "clone":  # the child of a clone that worked
        os._exit(0)
    out.append([name, r, errno.errorcode.get(e, str(e)) if r < 0 else "ok"])
s1, s2 = __import__("socket").socketpair()  # AF_UNIX: allowed (multiprocessing, asyncio)
out.append(["af_unix", s1.family, "ok"])
print(json.dumps(out))
"""


def _try_calls(sandbox: Sandbox) -> list[list]:
    import pyseccomp

    calls = [(name, pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name), args) for name, args, _ in _DENIED_CALLS]
    (run,) = sandbox.run(f"CALLS = {calls!r}\n" + _TRY_CALLS, [""])
    assert run.status == OK, run
    return json.loads(run.stdout)


@needs_all_layers
def test_the_syscall_filter_denies_each_call_that_widens_the_kernels_surface():
    """Every call of issue 58's list is denied (the errno the filter answers, not one of the call's own);
    AF_UNIX sockets, threads and subprocesses still work. Without the filter several of the same calls
    succeed here (the control: the denials are the filter's)."""
    results = _try_calls(Sandbox("strict", Limits(cpu_seconds=1, wall_seconds=2)))
    assert [r[0] for r in results] == [name for name, _, _ in _DENIED_CALLS] + ["af_unix"]
    assert [r[2] for r in results] == [want for _, _, want in _DENIED_CALLS] + ["ok"], results
    bare = _try_calls(Sandbox("best_effort", Limits(cpu_seconds=1, wall_seconds=2), seccomp=False))
    unfiltered = {r[0]: r[2] for r in bare}
    works = ("unshare", "keyctl", "add_key", "shmget", "memfd_create", "io_uring_setup", "ptrace", "process_vm_readv")
    assert {unfiltered[name] for name in works} == {"ok"}, bare
    assert [r[2] for r in bare if r[0] == "socket"][:4] == ["ok"] * 4, bare  # inet, inet6, netlink, vsock
    (run,) = Sandbox("strict").run(
        "import threading, subprocess\nt = threading.Thread(target=print, args=('thread',))\nt.start()\nt.join()\n"
        "print(subprocess.run(['/bin/echo', 'child'], capture_output=True, text=True).stdout.strip())",
        [""],
    )
    assert run.status == OK and run.stdout.split() == ["thread", "child"], run


def test_strict_refuses_without_the_syscall_filter():
    with pytest.raises(SandboxUnavailable, match="seccomp"):
        Sandbox("strict", seccomp=False).probe()
    assert not Sandbox("best_effort", seccomp=False).probe()["seccomp"]


@needs_all_layers
def test_nothing_a_test_leaves_reaches_the_next():
    """Files in /work and keys in a keyring (which outlive a run and are shared by a uid) do not reach
    a later test or run; SysV shared memory (outside RLIMIT_AS) cannot be made."""
    sandbox = Sandbox("strict", Limits(cpu_seconds=1, wall_seconds=2))
    leave = "import os\nprint(sorted(os.listdir('.')))\nopen('left-' + input().strip(), 'w').write('x')"
    assert [r.stdout.strip() for r in sandbox.run(leave, ["a", "b", "c"])] == ["[]"] * 3
    keys = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(libc.syscall(248, b'user', b'zq', b'v', 1, -4), ctypes.get_errno())"
    )
    if os.uname().machine == "x86_64":  # add_key(..., KEY_SPEC_USER_KEYRING)
        assert [r.stdout.split() for r in sandbox.run(keys, ["", ""])] == [["-1", "1"]] * 2


def test_a_failing_program_is_an_error_even_where_its_uid_cannot_read_the_standard_library():
    """best_effort without namespaces as root: candidates run as a fresh uid that may not read a
    Python installed under a 0700 home. The program's error is reported without importing anything."""
    sandbox = Sandbox("best_effort", Limits(cpu_seconds=1, wall_seconds=2), namespaces=False)
    runs = sandbox.run("raise ValueError('zq-boom')", ["", ""]) + sandbox.run("import fractions\nprint(1)", [""])
    assert [r.status for r in runs[:2]] == [ERROR, ERROR] and "ValueError: zq-boom" in runs[0].stderr, runs
    assert runs[2].status in (OK, ERROR) and (runs[2].status == OK) == (runs[2].stdout == "1\n"), runs
    _assert_no_leftovers()
