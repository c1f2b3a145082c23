"""The machine's time zone for jobs' schedules (SPEC §19): `$TZ` when it names a zone, else
/etc/localtime with its DST rules, else UTC; never a fixed offset."""

from __future__ import annotations

import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from bxcore.clock import local_zone

ZONES = Path("/usr/share/zoneinfo")
needs_zones = pytest.mark.skipif(not (ZONES / "Europe/Berlin").exists(), reason="no tzdata")


@needs_zones
@pytest.mark.parametrize("tz", ["Europe/Berlin", ":Europe/Berlin"])
def test_tz_naming_a_zone_is_that_zone(tz: str, tmp_path: Path) -> None:
    assert local_zone({"TZ": tz}, tmp_path / "none") == ZoneInfo("Europe/Berlin")


@needs_zones
def test_otherwise_localtime_is_read_with_its_dst_rules(tmp_path: Path) -> None:
    link = tmp_path / "localtime"
    link.symlink_to(ZONES / "Europe/Berlin")
    for env in ({}, {"TZ": "Nowhere/Atlantis"}, {"TZ": "../../etc/passwd"}):
        zone = local_zone(env, link)
        assert str(zone) == "Europe/Berlin"
        summer = datetime.datetime(2026, 7, 1, tzinfo=zone).utcoffset()
        winter = datetime.datetime(2026, 1, 1, tzinfo=zone).utcoffset()
        assert (summer, winter) == (datetime.timedelta(hours=2), datetime.timedelta(hours=1))


def test_no_zone_at_all_is_utc(tmp_path: Path) -> None:
    (tmp_path / "junk").write_bytes(b"not a TZif file")
    assert local_zone({}, tmp_path / "missing") is datetime.UTC
    assert local_zone({}, tmp_path / "junk") is datetime.UTC
