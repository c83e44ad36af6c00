"""The kinds of traffic a workload phase sends, one module each, registered in
``harness.registry.PHASE_KINDS``; ``kind.py`` says what a kind provides."""
