"""Node runners: start one LaunchSpec on its node (``start`` returns a handle with ``returncode()``
and ``stop(grace_s)``), here (local), over SSH (ssh) or through a Ray actor (ray).

Every runner gives the same guarantee: after ``stop`` (called on success, failure, timeout and
Ctrl-C alike) no process the launch started is left on the node.
"""
