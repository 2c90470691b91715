"""The format checker every validation in check_llguidance_masks.py uses: jsonschema's, made as
strict as RFC 3339 (date, date-time) and RFC 5321 (email) where jsonschema's is looser."""
import re

import jsonschema

RFC3339 = re.compile(r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])[Tt]([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?"
                     r"([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)$")
FORMATS = jsonschema.FormatChecker()


def full_date(s):
    """RFC 3339 full-date, years 0000-9999 (Python's date, which jsonschema uses, starts at 0001)."""
    m = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", s)
    if not m:
        return False
    y, mo, d = map(int, m.groups())
    leap = y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
    return 1 <= mo <= 12 and 1 <= d <= [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][mo - 1]


@FORMATS.checks("date")
def _date(s):
    return not isinstance(s, str) or full_date(s)


@FORMATS.checks("date-time")
def _date_time(s):
    return not isinstance(s, str) or (RFC3339.match(s) is not None and full_date(s[:10]))


@FORMATS.checks("email")
def _email(s):  # RFC 5321 addr-spec, dot-atom local part (what jsonschema's "@ in it" does not check)
    return not isinstance(s, str) or re.fullmatch(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
                                                  r"@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*"
                                                  r"[A-Za-z0-9])?)*", s) is not None
