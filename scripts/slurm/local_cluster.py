"""A single-node Slurm cluster on this machine, for the tests: Debian's munge and slurm-wlm daemons run as
child processes (foreground, known pids) with a generated munge key and a minimal slurm.conf in a temporary
folder: localhost only, loopback ports chosen free, ProctrackType=proctrack/linuxproc, TaskPlugin=task/none,
no cgroups, no accounting database. Every daemon started is stopped by its pid and the folder removed.

    with LocalCluster() as c:
        subprocess.run(["sbatch", ...], env=c.env)     # c.env has SLURM_CONF
"""
import getpass
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo", "srun")


def which(name):
    for d in ("/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        if os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    raise RuntimeError(f"{name}: not installed (scripts/setup.sh installs slurm-wlm and munge)")


def free_ports(count):
    """Ports free on the loopback interface now (bound, then released)."""
    socks, ports = [], []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class LocalCluster:
    NODE = "attnnode"
    PARTITION = "attn"

    def __init__(self, cpus=None, timeout=90):
        self.cpus = cpus or os.cpu_count()
        self.timeout = timeout
        self.procs = []
        self.dir = None

    def __enter__(self):
        for d in DAEMONS:
            which(d)
        self.dir = tempfile.mkdtemp(prefix="attn-slurm-")
        os.chmod(self.dir, 0o755)  # slurmd's job steps read the folder
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def _start(self):
        user = getpass.getuser()
        for sub in ("munge", "state", "spool", "log"):
            os.makedirs(self.path(sub), mode=0o700)
        key, sock = self.path("munge", "munge.key"), self.path("munge", "munge.socket")
        subprocess.run([which("mungekey"), "--create", "--keyfile", key], check=True, capture_output=True)
        os.chmod(key, 0o400)
        self._spawn("munged", [which("munged"), "--foreground", "--force", f"--key-file={key}", f"--socket={sock}",
                               f"--pid-file={self.path('munge', 'munged.pid')}",
                               f"--log-file={self.path('log', 'munged.log')}",
                               f"--seed-file={self.path('munge', 'munged.seed')}"])
        self._wait(lambda: os.path.exists(sock), "munged's socket")
        ctld_port, slurmd_port = free_ports(2)
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20) // 2
        conf = f"""ClusterName=attnlab
SlurmctldHost={socket.gethostname()}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
StateSaveLocation={self.path('state')}
SlurmdSpoolDir={self.path('spool')}
SlurmctldPidFile={self.path('slurmctld.pid')}
SlurmdPidFile={self.path('slurmd.pid')}
SlurmctldLogFile={self.path('log', 'slurmctld.log')}
SlurmdLogFile={self.path('log', 'slurmd.log')}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=3600
NodeName={self.NODE} NodeAddr=127.0.0.1 NodeHostname={socket.gethostname()} CPUs={self.cpus} RealMemory={mem} State=UNKNOWN
PartitionName={self.PARTITION} Nodes={self.NODE} Default=YES MaxTime=INFINITE State=UP
"""
        with open(self.path("slurm.conf"), "w") as f:
            f.write(conf)
        self.env = dict(os.environ, SLURM_CONF=self.path("slurm.conf"))
        self._spawn("slurmctld", [which("slurmctld"), "-D", "-i", "-f", self.path("slurm.conf")])
        self._spawn("slurmd", [which("slurmd"), "-D", "-N", self.NODE, "-f", self.path("slurm.conf")])
        self._wait(lambda: self.node_state() in ("idle", "mixed", "allocated"), "the node to be idle in sinfo")

    def _spawn(self, name, cmd):
        log = open(self.path("log", f"{name}.stdout"), "w")
        self.procs.append((name, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                  env=getattr(self, "env", None), start_new_session=True)))

    def _wait(self, ready, what):
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if ready():
                return
            for name, p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited ({p.returncode}) while waiting for {what}: {self.log_tail(name)}")
            time.sleep(0.5)
        raise RuntimeError(f"timed out after {self.timeout} s waiting for {what}")

    def log_tail(self, name):
        for f in (f"{name}.log", f"{name}.stdout"):
            p = self.path("log", f)
            if os.path.exists(p):
                return open(p, errors="replace").read()[-1500:]
        return "(no log)"

    def node_state(self):
        r = subprocess.run([which("sinfo"), "-h", "-n", self.NODE, "-o", "%T"], capture_output=True, text=True,
                           env=self.env)
        return r.stdout.strip().rstrip("*~#!%$@^-")

    def run(self, *cmd, check=True):
        return subprocess.run(list(cmd), capture_output=True, text=True, env=self.env, check=check)

    def stop(self):
        """Stops every daemon this object started (by pid: SIGTERM, then SIGKILL after 20 s), then removes the
        folder."""
        for name, p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs = []
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def main(argv):
    """local_cluster.py COMMAND...: runs COMMAND with a local cluster up (SLURM_CONF set), waits until the queue
    is empty, prints the time from the command's start and stops the cluster."""
    import sys
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: local_cluster.py COMMAND [ARG...]  (e.g. scripts/slurm/submit --profile smoke --shards 4 "
              "--out /tmp/sweep)")
        return 0 if argv else 2
    with LocalCluster() as c:
        t0 = time.monotonic()
        status = subprocess.run(argv, env=c.env).returncode
        while c.run("squeue", "-h").stdout.strip():
            time.sleep(1)
        print(f"local_cluster: '{' '.join(argv)}' exited {status}; queue empty after "
              f"{time.monotonic() - t0:.0f} s", file=sys.stderr)
    return status


if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv[1:]))
