"""Other suites' test configs turned into matrix directories that layer over the shipped one."""
