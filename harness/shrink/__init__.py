"""Shrinking a failing case: a smaller case that fails the same way (``search``), what "the same
way" means (``failure``), and how a smaller case is written as a matrix a run can launch
(``overlay``)."""
