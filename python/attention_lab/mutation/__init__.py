"""Mutation testing of the real kernels: the catalogue (catalogue.py) and how a report names where it ran."""


def where_text(where):
    """Where a mutation run ran, as its report and the README name it: the summary's "where" (scripts/mutate
    records it) as the sources' commit (12 digits, "-dirty" when the tree had uncommitted changes), the CPU, its
    cores and the vector kernels in use."""
    commit = where["commit"][:12] + "-dirty" * where["commit"].endswith("-dirty")
    return f"commit {commit}, {where['cpu']} ({where['cores']} cores, {where['simd']})"
