"""Log line formats for the log tailer: what each format's lines hold, and how to tell them apart.

Every format is a `LineFormat`: `start(line)` says, cheaply, whether a line
begins an entry of that format (returning a token the parse reuses), and
`parse(line, token)` gives the entry's `Parsed` fields: timestamp, level,
message and fields. The tailer parses only entries that may pass its filter,
so a regex filter costs a search per entry and nothing more.

The formats:

- `JSON`: one object per line (JSON Lines). Every key is kept in `fields`,
  nested objects as they are; the timestamp, level and message are taken
  from the usual keys (`timestamp`/`time`/`ts`/`@timestamp`,
  `level`/`severity`/`lvl`/`levelname`/`log.level`, `message`/`msg`/`@m`).
- `SYSLOG`: RFC 5424 (`<PRI>1 TIMESTAMP HOST APP PROCID MSGID [SD] MSG`,
  structured data as `fields["structured_data"]`, a dict of SD-IDs to their
  parameters) and RFC 3164 (`<PRI>Mmm dd hh:mm:ss HOST TAG[PID]: MSG`, also
  without the `<PRI>`, as files under /var/log hold it), told apart line by
  line. The level is the severity.
- `CLF` and `COMBINED`: the NCSA common and combined access logs (Apache's
  and nginx's defaults). The level comes from the status: 5xx `ERROR`, 4xx
  `WARNING`, others `INFO`.
- `STRUCTURED`: logfmt, `key=value key2="quoted value"`.
- `RAW`: lines as they are; a leading ISO-8601 timestamp and a level word
  (`ERROR`, `WARN`..., or `[error]` in brackets) are recognised.
- `AUTO`: the format is chosen per file from its first lines.

Lines that are not of the file's format and look like the rest of an entry
(indented, `Caused by:`, `... 3 more`, a traceback's lines, a Java exception
header) continue the entry before them; see `is_continuation`.
"""

from __future__ import annotations

import datetime
import enum
import functools
import json
import re
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Protocol

import attrs


class LogFormat(enum.Enum):
    """The format of a log's lines; see the module docstring for what each holds.

    `"logfmt"` is accepted for `STRUCTURED`, `"nginx"` and `"apache"` for
    `COMBINED`, `"common"` for `CLF`, `"jsonl"` for `JSON`.
    """

    JSON = "json"
    SYSLOG = "syslog"
    CLF = "clf"
    COMBINED = "combined"
    STRUCTURED = "structured"
    AUTO = "auto"
    RAW = "raw"

    @classmethod
    def _missing_(cls, value: object) -> LogFormat | None:
        if isinstance(value, str):
            lowered = value.lower()
            alias = _FORMAT_ALIASES.get(lowered, lowered)
            for member in cls:
                if member.value == alias:
                    return member
        return None


_FORMAT_ALIASES = {
    "logfmt": "structured",
    "nginx": "combined",
    "apache": "combined",
    "common": "clf",
    "jsonl": "json",
    "ndjson": "json",
    "text": "raw",
}


class LogLevel(enum.Enum):
    """A log entry's level, from least to most severe.

    Compare with `rank`: `LogLevel.ERROR.rank > LogLevel.WARNING.rank`. The
    usual spellings are read into these (`warn`, `err`, `fatal`, `crit`,
    `emerg`, `panic`, `severe`, `fine`..., pino's numbers, syslog's
    severities); `LogLevel("warn")` works too.
    """

    TRACE = "trace"
    DEBUG = "debug"
    INFO = "info"
    NOTICE = "notice"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"
    ALERT = "alert"
    EMERGENCY = "emergency"

    @property
    def rank(self) -> int:
        """0 for `TRACE` up to 8 for `EMERGENCY`."""
        return _RANK[self]

    @classmethod
    def _missing_(cls, value: object) -> LogLevel | None:
        return level_of(value)


_RANK = {level: index for index, level in enumerate(LogLevel)}

_LEVEL_NAMES: dict[str, LogLevel] = {
    "trace": LogLevel.TRACE,
    "finest": LogLevel.TRACE,
    "finer": LogLevel.TRACE,
    "verbose": LogLevel.TRACE,
    "debug": LogLevel.DEBUG,
    "dbg": LogLevel.DEBUG,
    "fine": LogLevel.DEBUG,
    "config": LogLevel.DEBUG,
    "d": LogLevel.DEBUG,
    "info": LogLevel.INFO,
    "information": LogLevel.INFO,
    "informational": LogLevel.INFO,
    "inf": LogLevel.INFO,
    "i": LogLevel.INFO,
    "notice": LogLevel.NOTICE,
    "warning": LogLevel.WARNING,
    "warn": LogLevel.WARNING,
    "wrn": LogLevel.WARNING,
    "w": LogLevel.WARNING,
    "error": LogLevel.ERROR,
    "err": LogLevel.ERROR,
    "eror": LogLevel.ERROR,
    "severe": LogLevel.ERROR,
    "e": LogLevel.ERROR,
    "critical": LogLevel.CRITICAL,
    "crit": LogLevel.CRITICAL,
    "fatal": LogLevel.CRITICAL,
    "ftl": LogLevel.CRITICAL,
    "f": LogLevel.CRITICAL,
    "alert": LogLevel.ALERT,
    "emergency": LogLevel.EMERGENCY,
    "emerg": LogLevel.EMERGENCY,
    "panic": LogLevel.EMERGENCY,
}
for _level in LogLevel:
    _LEVEL_NAMES[_level.value] = _level
# Every spelling in its usual cases, so that most lookups need no lower().
for _name, _level in list(_LEVEL_NAMES.items()):
    _LEVEL_NAMES[_name.upper()] = _level
    _LEVEL_NAMES[_name.capitalize()] = _level

# RFC 5424's severities, 0 (emergency) to 7 (debug).
_SEVERITIES = (
    LogLevel.EMERGENCY,
    LogLevel.ALERT,
    LogLevel.CRITICAL,
    LogLevel.ERROR,
    LogLevel.WARNING,
    LogLevel.NOTICE,
    LogLevel.INFO,
    LogLevel.DEBUG,
)
_SEVERITY_NAMES = ("emerg", "alert", "crit", "err", "warning", "notice", "info", "debug")
_FACILITIES = (
    "kern",
    "user",
    "mail",
    "daemon",
    "auth",
    "syslog",
    "lpr",
    "news",
    "uucp",
    "cron",
    "authpriv",
    "ftp",
    "ntp",
    "security",
    "console",
    "solaris-cron",
    *(f"local{n}" for n in range(8)),
)


def level_of(value: object) -> LogLevel | None:
    """The level a field's value names, or `None`.

    Strings are read case-insensitively (`"WARN"`, `"Error"`, `"fatal"`);
    numbers of 10 and more are pino/bunyan levels (10 trace ... 60 fatal),
    0 to 7 syslog severities.
    """
    if isinstance(value, LogLevel):
        return value
    if isinstance(value, str):
        found = _LEVEL_NAMES.get(value)
        if found is None:
            found = _LEVEL_NAMES.get(value.strip().lower())
        return found
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = int(value)
        if 0 <= number <= 7 and number == value:
            return _SEVERITIES[number]
        if number >= 10:
            return _PINO[min(number // 10, 6) - 1]
    return None


_PINO = (
    LogLevel.TRACE,
    LogLevel.DEBUG,
    LogLevel.INFO,
    LogLevel.WARNING,
    LogLevel.ERROR,
    LogLevel.CRITICAL,
)


@attrs.frozen
class Parsed:
    """What a format reads from an entry's first line."""

    timestamp: str | None
    level: LogLevel | None
    message: str
    fields: dict[str, Any]


class LineFormat(Protocol):
    """One format's reader: spot the first line of an entry, then parse it."""

    format: ClassVar[LogFormat]

    def start(self, line: str) -> object:
        """A truthy token if `line` begins an entry of this format, else a falsy one."""
        ...

    def parse(self, line: str, token: object) -> Parsed:
        """The entry's fields, from its first line and the token `start` gave."""
        ...


# --- continuation lines ---------------------------------------------------------------

_CONTINUATION = re.compile(
    r"""
    [ \t]                                   # indented: "\tat com.example.App.main(...)"
    | Caused\ by:\ | Suppressed:\           # Java's chained causes
    | \.\.\.\ \d+\ (?:more|common\ frames)   # "... 5 more"
    | Traceback\ \(most\ recent\ call\ last\):
    | During\ handling\ of\ the\ above\ exception
    | The\ above\ exception\ was\ the\ direct\ cause
    # a qualified exception name: "java.io.IOException: x"
    | (?:[A-Za-z_$][\w$]*\.)+[A-Za-z_$][\w$]*(?:Exception|Error|Throwable)(?::|$)
    """,
    re.VERBOSE,
)
# Any line of a block that could continue an entry: a block without one holds
# only entries of one line each.
# Searched for in a block of lines (with a newline put before it): a line that
# may continue an entry, or an empty one. Each alternative follows a newline,
# so the search runs at the speed of finding newlines.
CONTINUATION_LINES = re.compile(
    r"\n(?:[ \t\n]|Caused by: |Suppressed: |\.\.\. \d+ (?:more|common frames)"
    r"|Traceback \(most recent call last\):|During handling of the above exception"
    r"|The above exception was the direct cause"
    r"|(?:[A-Za-z_$][\w$]*\.)+[A-Za-z_$][\w$]*(?:Exception|Error|Throwable)(?::|\n))"
)
# The last line of a Python traceback ("ValueError: boom"), a continuation only
# inside a traceback, where the entry already has continuation lines.
_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(?:Error|Exception|Warning|Exit|Interrupt)(?::|$)")


def is_continuation(line: str, in_trace: bool) -> bool:
    """Whether `line` continues the entry before it rather than starting one.

    Indented lines, Java's `Caused by:` and `... N more`, a Python traceback's
    lines, and a qualified exception name (`java.lang.IllegalStateException:
    boom`) continue an entry; a bare `ValueError: boom` does only when the
    entry already has continuation lines (`in_trace`). An empty line starts
    nothing: it continues too.
    """
    if not line:
        return True
    if _CONTINUATION.match(line) is not None:
        return True
    return in_trace and _EXCEPTION_LINE.match(line) is not None


# --- timestamps -----------------------------------------------------------------------

_MONTHS = {
    name: number
    for number, name in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"),
        start=1,
    )
}


def _epoch(value: float) -> str:
    # Milliseconds, microseconds or nanoseconds since the epoch are far larger
    # than any date in seconds this side of the year 5000.
    while abs(value) > 1e11:
        value /= 1000
    moment = datetime.datetime.fromtimestamp(value, datetime.UTC)
    return moment.isoformat().replace("+00:00", "Z")


def _timestamp_text(value: object) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        return value or None
    if isinstance(value, int | float):
        try:
            return _epoch(float(value))
        except (OverflowError, OSError, ValueError):
            return str(value)
    return str(value)


def _year_for(month: int, day: int) -> int:
    """The year of a syslog date that has none: this year, or last year's if it would be ahead."""
    today = datetime.date.today()
    if (month, day) > (today.month, today.day + 1) and month - today.month > 1:
        return today.year - 1
    return today.year


# --- JSON -----------------------------------------------------------------------------

_TIME_KEYS = ("timestamp", "time", "ts", "@timestamp", "datetime", "date", "@t", "t")
_LEVEL_KEYS = ("level", "severity", "lvl", "levelname", "loglevel", "log_level", "@l")
_MESSAGE_KEYS = ("message", "msg", "@m", "@mt", "text", "event", "log")


def _find(fields: dict[str, Any], keys: Iterable[str]) -> object:
    for key in keys:
        value = fields.get(key)
        if value is not None:
            return value
    return None


def _json_level(fields: dict[str, Any]) -> LogLevel | None:
    for key in _LEVEL_KEYS:
        value = fields.get(key)
        if value is not None:
            level = level_of(value)
            if level is not None:
                return level
    log = fields.get("log")
    if isinstance(log, dict):  # Elastic Common Schema: {"log": {"level": "error"}}
        return level_of(log.get("level"))
    return None


_loads: Callable[[str], Any] = json.loads
# Every plain value of a level key anywhere in a line (nested ones too).
JSON_LEVEL_VALUES = re.compile(
    r'"(?:level|severity|lvl|levelname|loglevel|log_level|@l)"\s*:\s*'
    r'(?:"([^"\\]*)"|(-?\d+)(?![.\deE]))'
)


_JSON_LEVEL_KEYS = ("level", "severity", "lvl", "levelname", "loglevel", "log_level", "@l")


@functools.cache
def json_level_finder(rank: int, keys: tuple[str, ...] = _JSON_LEVEL_KEYS) -> re.Pattern[str]:
    """A regex found in a JSON line only where a level key's value names `rank` or more.

    Every line whose level is that high has a match (if its level key is
    among `keys`); a line with a match may still be lower (a nested key), so
    it is parsed to tell. Give only the keys a block holds: with one key the
    regex begins with a literal, which `re` finds at the speed of a string
    search.
    """
    names = sorted(
        (re.escape(name) for name, level in _LEVEL_NAMES.items() if _RANK[level] >= rank),
        key=len,
        reverse=True,
    )
    numbers = [str(n) for n in range(100) if (lv := level_of(n)) is not None and _RANK[lv] >= rank]
    if (big := level_of(100)) is not None and _RANK[big] >= rank:
        numbers.append(r"[1-9]\d{2,}")
    key = "|".join(re.escape(key) for key in keys)
    key = f'"{keys[0]}"' if len(keys) == 1 else f'"(?:{key})"'
    return re.compile(
        key
        + r'\s*:\s*(?:"(?i:'
        + "|".join(names)
        + r')"|(?:'
        + "|".join(numbers or ["(?!)"])
        + r")(?![.\deE]))"
    )


def json_level_keys(text: str) -> tuple[str, ...]:
    """The level keys `JsonFormat` reads that occur in `text` (as quoted keys)."""
    return tuple(key for key in _JSON_LEVEL_KEYS if f'"{key}"' in text)


def json_may_reach(line: str, rank: int) -> bool:
    """Whether a JSON line's level can be `rank` or more, judged without parsing it.

    False only when certain: the level `JsonFormat.parse` finds is the value
    of one of the level keys it looks at, so when every such value in the
    line (at any depth) names a lower level, or none names a level at all,
    the line's level is lower or absent.
    """
    for text, number in JSON_LEVEL_VALUES.findall(line):
        level = level_of(text) if text else level_of(int(number))
        if level is not None and _RANK[level] >= rank:
            return True
    return False


class JsonFormat:
    """JSON Lines: one object per line."""

    format: ClassVar[LogFormat] = LogFormat.JSON

    def start(self, line: str) -> object:
        """A line that opens an object begins an entry."""
        return line[:1] == "{"

    def parse(self, line: str, token: object) -> Parsed:
        """The object's keys as fields; timestamp, level and message from the usual keys."""
        try:
            data = _loads(line)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            return _raw_parse(line)
        message = _find(data, _MESSAGE_KEYS)
        if message is None:
            text = ""
        elif isinstance(message, str):
            text = message
        else:
            text = json.dumps(message, ensure_ascii=False)
        return Parsed(_timestamp_text(_find(data, _TIME_KEYS)), _json_level(data), text, data)


# --- syslog ---------------------------------------------------------------------------

_RFC5424 = re.compile(
    r"<(\d{1,3})>(\d{1,2}) (\S+) (\S+) (\S+) (\S+) (\S+) "
    r"(-|\[.*?(?<!\\)\](?:\[.*?(?<!\\)\])*)(?: (.*))?$",
    re.DOTALL,
)
_RFC3164 = re.compile(
    r"(?:<(\d{1,3})>)?([A-Z][a-z]{2}) ([ \d]\d) (\d\d:\d\d:\d\d) (\S+) "
    r"([^:\[\s]+)?(?:\[([^\]]*)\])?:? ?(.*)$",
    re.DOTALL,
)
_SD_ELEMENT = re.compile(r'\[([^\s\]=]+)((?:\s+[^\s\]=]+="[^"\\]*(?:\\.[^"\\]*)*")*)\s*\]')
_SD_PARAM = re.compile(r'([^\s\]=]+)="([^"\\]*(?:\\.[^"\\]*)*)"')
_SD_UNESCAPE = re.compile(r"\\([\"\\\]])")


def structured_data(text: str) -> dict[str, dict[str, str]]:
    """RFC 5424 structured data as `{sd_id: {param: value}}` (`-` is empty)."""
    elements: dict[str, dict[str, str]] = {}
    if text == "-":
        return elements
    for element in _SD_ELEMENT.finditer(text):
        params = elements.setdefault(element.group(1), {})
        for param in _SD_PARAM.finditer(element.group(2)):
            params[param.group(1)] = _SD_UNESCAPE.sub(r"\1", param.group(2))
    return elements


def _nil(value: str) -> str | None:
    return None if value == "-" else value


def _priority(text: str | None, fields: dict[str, Any]) -> LogLevel | None:
    if text is None:
        return None
    priority = int(text)
    if priority > 191:
        return None
    facility, severity = divmod(priority, 8)
    fields["facility"] = _FACILITIES[facility] if facility < len(_FACILITIES) else facility
    fields["severity"] = _SEVERITY_NAMES[severity]
    return _SEVERITIES[severity]


class SyslogFormat:
    """Syslog lines, RFC 5424 or RFC 3164, told apart per line."""

    format: ClassVar[LogFormat] = LogFormat.SYSLOG

    def start(self, line: str) -> object:
        """The header's match, if the line has one."""
        if line[:1] == "<":
            found = _RFC5424.match(line)
            if found is not None:
                return found
        return _RFC3164.match(line)

    def parse(self, line: str, token: object) -> Parsed:
        """Header fields, the severity as the level, RFC 5424's structured data."""
        if not isinstance(token, re.Match):
            return _raw_parse(line)
        fields: dict[str, Any] = {}
        groups = token.groups()
        if token.re is _RFC5424:
            level = _priority(groups[0], fields)
            fields["version"] = int(groups[1])
            fields["hostname"] = _nil(groups[3])
            fields["appname"] = _nil(groups[4])
            fields["procid"] = _nil(groups[5])
            fields["msgid"] = _nil(groups[6])
            fields["structured_data"] = structured_data(groups[7])
            message = groups[8] or ""
            if message.startswith("\ufeff"):
                message = message[1:]
            return Parsed(_nil(groups[2]), level, message, fields)
        level = _priority(groups[0], fields)
        month = _MONTHS.get(groups[1])
        day = int(groups[2])
        timestamp = None
        if month is not None:
            timestamp = f"{_year_for(month, day):04d}-{month:02d}-{day:02d}T{groups[3]}"
        fields["hostname"] = groups[4]
        fields["appname"] = groups[5]
        fields["procid"] = groups[6]
        message = groups[7]
        if level is None:
            level = _raw_level(message)
        return Parsed(timestamp, level, message, fields)


# --- access logs ----------------------------------------------------------------------

_CLF = re.compile(
    r'(\S+) (\S+) (\S+) \[([^\]]+)\] "([^"\\]*(?:\\.[^"\\]*)*)" (\d{3}|-) (\d+|-)'
    r'(?: "([^"\\]*(?:\\.[^"\\]*)*)" "([^"\\]*(?:\\.[^"\\]*)*)")?(.*)$'
)


def _clf_time(text: str) -> str:
    """`10/Oct/2000:13:55:36 -0700` as `2000-10-10T13:55:36-07:00`."""
    try:
        day, month, rest = text.split("/", 2)
        year, clock = rest[:4], rest[5:13]
        zone = rest[14:]
        number = _MONTHS[month]
        if len(zone) == 5:
            zone = f"{zone[:3]}:{zone[3:]}"
        return f"{year}-{number:02d}-{int(day):02d}T{clock}{zone}"
    except (KeyError, ValueError, IndexError):
        return text


def _status_level(status: int | None) -> LogLevel:
    if status is None or status < 400:
        return LogLevel.INFO
    return LogLevel.ERROR if status >= 500 else LogLevel.WARNING


def access_log_level(token: re.Match[str]) -> LogLevel:
    """The level of an access log line from its match (`AccessLogFormat.start`): its status."""
    status = token.group(6)
    return _status_level(None if status == "-" else int(status))


class AccessLogFormat:
    """NCSA common access log lines (`CLF`); `CombinedFormat` for the combined ones."""

    format: ClassVar[LogFormat] = LogFormat.CLF
    combined: ClassVar[bool] = False

    def start(self, line: str) -> object:
        """The line's match: combined needs the referer and user agent too."""
        found = _CLF.match(line)
        if found is None or (self.combined and found.group(9) is None):
            return None
        return found

    def parse(self, line: str, token: object) -> Parsed:
        """The request's parts, status and size as fields; the request line as message."""
        if not isinstance(token, re.Match):
            return _raw_parse(line)
        host, ident, user, when, request, status, size, referer, agent, _rest = token.groups()
        parts = request.split(" ")
        code = None if status == "-" else int(status)
        fields: dict[str, Any] = {
            "remote_host": host,
            "ident": _nil(ident),
            "user": _nil(user),
            "request": request,
            "method": parts[0] if len(parts) == 3 else None,
            "path": parts[1] if len(parts) == 3 else None,
            "protocol": parts[2] if len(parts) == 3 else None,
            "status": code,
            "bytes": None if size == "-" else int(size),
        }
        if agent is not None:
            fields["referer"] = _nil(referer)
            fields["user_agent"] = _nil(agent)
        return Parsed(_clf_time(when), _status_level(code), request, fields)


class CombinedFormat(AccessLogFormat):
    """NCSA combined access log lines (`COMBINED`): common, then the referer and user agent."""

    format: ClassVar[LogFormat] = LogFormat.COMBINED
    combined: ClassVar[bool] = True


# --- logfmt ---------------------------------------------------------------------------

_LOGFMT_PAIR = re.compile(r'([^\s=]+)(=("[^"\\]*(?:\\.[^"\\]*)*"|\S*))?')
_LOGFMT_START = re.compile(r'[^\s="]+=')
# The escapes logfmt writers use in a quoted value (go-logfmt's, as JSON's):
# \n, \t, \r, \", \\ and \uXXXX; any other escaped character stands for itself.
_LOGFMT_UNESCAPE = re.compile(r"\\(u[0-9A-Fa-f]{4}|.)")
_LOGFMT_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}


def _logfmt_unescape(match: re.Match[str]) -> str:
    escaped = match.group(1)
    if len(escaped) == 5:
        return chr(int(escaped[1:], 16))
    return _LOGFMT_ESCAPES.get(escaped, escaped)


def logfmt(line: str) -> dict[str, str | bool]:
    """The `key=value` pairs of a logfmt line; a bare key (no `=`) is `True`."""
    pairs: dict[str, str | bool] = {}
    for key, equals, value in _LOGFMT_PAIR.findall(line):
        if not equals:
            pairs[key] = True
        elif len(value) >= 2 and value[0] == '"' and value[-1] == '"':
            text = _LOGFMT_UNESCAPE.sub(_logfmt_unescape, value[1:-1])
            if "\\u" in value[1:-1] and any("\ud800" <= char <= "\udfff" for char in text):
                # A character past the BMP is written as two escaped halves: join them.
                text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
            pairs[key] = text
        else:
            pairs[key] = value
    return pairs


class LogfmtFormat:
    """logfmt (`STRUCTURED`): `key=value` pairs."""

    format: ClassVar[LogFormat] = LogFormat.STRUCTURED

    def start(self, line: str) -> object:
        """A line that opens with `key=` begins an entry."""
        return _LOGFMT_START.match(line) is not None

    def parse(self, line: str, token: object) -> Parsed:
        """Every pair in fields; timestamp, level and message from the usual keys."""
        fields: dict[str, Any] = logfmt(line)
        message = _find(fields, _MESSAGE_KEYS)
        level = None
        for key in _LEVEL_KEYS:
            value = fields.get(key)
            if value is not None and (level := level_of(value)) is not None:
                break
        timestamp = _find(fields, _TIME_KEYS)
        return Parsed(
            timestamp if isinstance(timestamp, str) else None,
            level,
            message if isinstance(message, str) else line,
            fields,
        )


# --- raw ------------------------------------------------------------------------------

_RAW_TIME = re.compile(
    r"\[?(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\]?(?=\s|$)"
)
_RAW_LEVEL = re.compile(
    r"(?<![\w-])(TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|ERR|FATAL|CRITICAL|CRIT|SEVERE"
    r"|ALERT|EMERG|PANIC)(?![\w-])"
    r"|\[(trace|debug|info|notice|warn|warning|error|err|fatal|crit|critical|alert|emerg)\]"
    r"|^(trace|debug|info|notice|warn|warning|error|err|fatal|crit|critical|alert|emerg|panic):"
)


def _raw_level(line: str) -> LogLevel | None:
    found = _RAW_LEVEL.search(line, 0, 160)
    if found is None:
        return None
    return _LEVEL_NAMES.get(found.group(1) or found.group(2) or found.group(3))


def _raw_parse(line: str) -> Parsed:
    found = _RAW_TIME.match(line)
    timestamp = None
    if found is not None:
        timestamp = f"{found.group(1)}T{found.group(2).replace(',', '.')}"
    return Parsed(timestamp, _raw_level(line), line, {})


class RawFormat:
    """Lines as they are, with a leading timestamp and a level word recognised."""

    format: ClassVar[LogFormat] = LogFormat.RAW

    def start(self, line: str) -> object:
        """Every line that is no continuation begins an entry."""
        return True

    def parse(self, line: str, token: object) -> Parsed:
        """The line as message; timestamp and level if it has them."""
        return _raw_parse(line)


def line_format(format: LogFormat) -> LineFormat:
    """The reader of `format` (not `AUTO`: `detect_format` picks one first)."""
    if format is LogFormat.JSON:
        return JsonFormat()
    if format is LogFormat.SYSLOG:
        return SyslogFormat()
    if format is LogFormat.CLF:
        return AccessLogFormat()
    if format is LogFormat.COMBINED:
        return CombinedFormat()
    if format is LogFormat.STRUCTURED:
        return LogfmtFormat()
    if format is LogFormat.RAW:
        return RawFormat()
    raise ValueError(f"{format} has no reader of its own: detect the file's format first")


# Most specific first: a combined line is also a CLF line, JSON may hold "=".
_CANDIDATES = (
    LogFormat.JSON,
    LogFormat.SYSLOG,
    LogFormat.COMBINED,
    LogFormat.CLF,
    LogFormat.STRUCTURED,
)


def detect_format(lines: Iterable[str]) -> LogFormat | None:
    """The format most of these first lines of a file are in; `None` with no lines to go by.

    A format is chosen when at least half of the lines that begin entries
    (continuations are not counted) are of it; otherwise `RAW`.
    """
    sample = [line for line in lines if line.strip()][:20]
    starts = [line for line in sample if not is_continuation(line, False)]
    if not starts:
        return None if not sample else LogFormat.RAW
    for candidate in _CANDIDATES:
        reader = line_format(candidate)
        hits = 0
        for line in starts:
            token = reader.start(line)
            if not token:
                continue
            if candidate is LogFormat.JSON:
                try:
                    if not isinstance(json.loads(line), dict):
                        continue
                except ValueError:
                    continue
            elif candidate is LogFormat.STRUCTURED and len(logfmt(line)) < 2:
                continue
            hits += 1
        if hits * 2 >= len(starts) and hits:
            return candidate
    return LogFormat.RAW
