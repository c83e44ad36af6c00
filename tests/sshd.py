"""A real, throwaway OpenSSH server for the SSH runner's tests.

``Sshd.start(root)`` generates a host key and a client key into ``root`` (``ssh-keygen -t ed25519
-N ''``), writes its own sshd_config (127.0.0.1 only, a free port, public-key log-in only, the
authorized_keys file in ``root``) and runs ``/usr/sbin/sshd -D -f CONFIG`` as this user. ``stop()``
kills that sshd and every process it forked (by pid, never by name). Needs root (sshd's
privilege separation) and Debian's openssh-server: ``scripts/install-sshd.sh``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"
INSTALL = Path(__file__).resolve().parent.parent / "scripts" / "install-sshd.sh"


def unavailable() -> str | None:
    """Why no sshd can be run here, or None. Installs openssh-server when it is missing and this
    is root (scripts/install-sshd.sh)."""
    if os.geteuid() != 0:
        return "the throwaway sshd runs as root (privilege separation); not root"
    if not (Path(SSHD).exists() and shutil.which("ssh") and shutil.which("ssh-keygen")):
        try:
            done = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"openssh-server is missing and {INSTALL.name} failed: {err}"
        if done.returncode != 0 or not Path(SSHD).exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
            return f"openssh-server is missing and {INSTALL.name} could not install it: {tail[0]}"
    if not shutil.which("setsid"):
        return "setsid (util-linux) is missing"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def descendants(pid: int) -> list[int]:
    kids, out, todo = _children(), [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


@dataclass
class Sshd:
    root: Path
    port: int
    proc: subprocess.Popen
    client_key: Path
    host_key: Path
    host: str = "127.0.0.1"
    user: str = "root"

    @classmethod
    def start(cls, root: Path) -> Sshd:
        root.mkdir(parents=True, exist_ok=True)
        host_key, client_key = root / "host_ed25519", root / "client_ed25519"
        for key in (host_key, client_key):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ppconf-test", "-f", str(key)],
                check=True,
                capture_output=True,
            )
        (root / "authorized_keys").write_text(Path(f"{client_key}.pub").read_text())
        Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)  # privilege separation dir
        last = ""
        for _ in range(5):  # the free port may be taken between the probe and sshd's bind
            port = free_port()
            config = root / "sshd_config"
            config.write_text(
                f"Port {port}\n"
                "ListenAddress 127.0.0.1\n"
                f"HostKey {host_key}\n"
                f"PidFile {root / 'sshd.pid'}\n"
                f"AuthorizedKeysFile {root / 'authorized_keys'}\n"
                "PermitRootLogin prohibit-password\n"
                "PubkeyAuthentication yes\n"
                "PasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\n"
                "UsePAM no\n"
                "StrictModes no\n"
                "PrintMotd no\n"
                "PrintLastLog no\n"
                "LogLevel VERBOSE\n"
            )
            log = open(root / "sshd.log", "ab")
            proc = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            log.close()
            server = cls(root, port, proc, client_key, host_key)
            end = time.monotonic() + 10
            while time.monotonic() < end and proc.poll() is None:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        return server
                except OSError:
                    time.sleep(0.05)
            server.stop()
            last = (root / "sshd.log").read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            last = last[0]
        raise RuntimeError(f"sshd did not start: {last}")

    def stop(self) -> None:
        """The listener first (no new sessions), then every process it forked, by pid."""
        doomed = descendants(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in doomed + [p for d in doomed for p in descendants(d)]:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            end = time.monotonic() + 3
            while time.monotonic() < end and any(Path(f"/proc/{p}").exists() for p in doomed):
                time.sleep(0.05)

    def crash(self) -> None:
        """As if the node's sshd died: SIGKILL the listener and every sshd process serving a
        connection, and nothing else — what the sessions run is left to notice on its own."""
        doomed = [self.proc.pid] + [p for p in descendants(self.proc.pid) if _exe(p) == SSHD]
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
