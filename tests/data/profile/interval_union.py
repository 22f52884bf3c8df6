"""Reference helper shared by the fixture scripts here: total length covered by [start, end) intervals,
overlaps counted once (what the profiler calls GPU busy time). Independent of the C++ implementation."""


def interval_union(intervals):
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is not None and s <= cur_e:
            cur_e = max(cur_e, e)
        else:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
    if cur_e is not None:
        total += cur_e - cur_s
    return total
