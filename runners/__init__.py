"""Node runners, behind one protocol (``runners.protocol``: ``start`` a LaunchSpec on its node and
get a handle with ``pid``, ``pgid``, ``returncode()``, ``stop(grace_s)`` and ``log_path``; ``run``
short programs on nodes; ``close``), found by the inventory's ``reach`` in ``runners.registry``:
here (local), over SSH (ssh) or through a Ray actor (ray).

Every runner gives the same guarantee: after ``stop`` (called on success, failure, timeout and
Ctrl-C alike) no process the launch started is left on the node.
"""
