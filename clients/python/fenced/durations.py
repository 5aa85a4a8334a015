"""Go duration text, the form fenced sends and takes TTLs and waits in."""

__all__ = ["parse_duration"]


def _duration(seconds):
    """Go duration text for a number of seconds ("10s", "250ms")."""
    if isinstance(seconds, str):
        return seconds
    ms = round(float(seconds) * 1000)
    if ms % 1000 == 0:
        return "%ds" % (ms // 1000)
    return "%dms" % ms


def parse_duration(text):
    """Seconds in Go duration text ("1m30s", "250ms"); ValueError if not one."""
    units = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    s, total, sign = text, 0.0, 1.0
    if s.startswith("-"):
        sign, s = -1.0, s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError("not a duration: %r" % text)
    while s:
        i = 0
        while i < len(s) and (s[i].isdigit() or s[i] == "."):
            i += 1
        j = i
        while j < len(s) and not (s[j].isdigit() or s[j] == "."):
            j += 1
        num, unit = s[:i], s[i:j]
        if not num or unit not in units:
            raise ValueError("not a duration: %r" % text)
        total += float(num) * units[unit]
        s = s[j:]
    return sign * total
