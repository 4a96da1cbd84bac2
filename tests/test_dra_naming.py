"""Device names in ResourceSlices: DNS labels, stable, distinct for distinct units."""

from __future__ import annotations

import re

from genericdp.kubeletplugin.naming import DNS1123_LABEL_MAX, device_name

LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def test_a_plain_id_reads_as_resource_and_id_then_a_hash() -> None:
    assert re.fullmatch(r"serial-ttyusb0-[0-9a-f]{8}", device_name("example.com/serial", "ttyusb0"))


def test_resources_of_one_short_name_in_two_domains_do_not_share_names() -> None:
    assert device_name("a.com/serial", "a1") != device_name("b.com/serial", "a1")


def test_any_id_gives_a_dns_label() -> None:
    ids = ["usb-FTDI_FT232R_A1B2:1", "0000:01:00.0", "all", "X" * 63, "::", "-a-", "é"]
    for unit_id in ids:
        name = device_name("example.com/serial-port", unit_id)
        assert LABEL.fullmatch(name), (unit_id, name)
        assert len(name) <= DNS1123_LABEL_MAX


def test_ids_that_differ_only_in_what_is_lost_get_different_names() -> None:
    pairs = [("ABC", "abc"), ("a_b", "a.b"), ("x" * 60 + "1", "x" * 60 + "2")]
    for first, second in pairs:
        assert device_name("e.com/r", first) != device_name("e.com/r", second)


def test_the_same_unit_always_gets_the_same_name() -> None:
    assert device_name("e.com/r", "usb-A:1") == device_name("e.com/r", "usb-A:1")
    assert device_name("e.com/r", "usb-A:1") != device_name("e.com/other", "usb-A:1")
