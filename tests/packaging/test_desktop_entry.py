"""The desktop entry and AppStream metainfo: the official validators when installed
(desktop-file-utils, appstream), and always a strict check of the rules they would enforce."""
import re
import shutil
import subprocess
import tomllib
import xml.etree.ElementTree as ET

import pytest

from packaging_support import DESKTOP_FILE, METAINFO_FILE, ROOT, parse_desktop

MAIN_CATEGORIES = {"AudioVideo", "Audio", "Video", "Development", "Education", "Game", "Graphics",
                   "Network", "Office", "Science", "Settings", "System", "Utility"}
DESKTOP_KEYS = {"Type", "Version", "Name", "GenericName", "Comment", "Exec", "TryExec", "Icon",
                "Terminal", "Categories", "Keywords", "StartupNotify", "StartupWMClass",
                "NoDisplay", "MimeType", "Actions"}


@pytest.mark.skipif(shutil.which("desktop-file-validate") is None,
                    reason="desktop-file-validate not installed (apt-get install desktop-file-utils)")
def test_desktop_file_validate_accepts_entry():
    result = subprocess.run(["desktop-file-validate", str(DESKTOP_FILE)], capture_output=True,
                            text=True)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


@pytest.mark.skipif(shutil.which("appstreamcli") is None,
                    reason="appstreamcli not installed (apt-get install appstream)")
def test_appstreamcli_validates_metainfo_pedantically():
    result = subprocess.run(["appstreamcli", "validate", "--no-net", "--pedantic",
                             str(METAINFO_FILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_desktop_entry_structure():
    groups = parse_desktop(DESKTOP_FILE)
    assert list(groups) == ["Desktop Entry"]
    entry = groups["Desktop Entry"]
    assert set(entry) <= DESKTOP_KEYS | {k for k in entry if k.startswith("X-")}, set(entry)
    assert entry["Type"] == "Application"
    assert entry["Version"] in {"1.0", "1.1", "1.2", "1.3", "1.4"}
    assert entry["Terminal"] == "false", "a window app must not open a terminal"
    # The committed entry runs the console script from PATH; install_desktop.sh makes it absolute.
    assert entry["Exec"].split() == ["swarmscope", "--model", "default"]
    assert entry["TryExec"] == "swarmscope"
    for key in ("Categories", "Keywords"):
        assert entry[key].endswith(";"), f"{key} must end with ';'"
    categories = entry["Categories"].rstrip(";").split(";")
    assert len(MAIN_CATEGORIES.intersection(categories)) == 1, "exactly one main category"
    # Qt names the X11 window class after the application name: the dock groups it by this.
    assert entry["StartupWMClass"] == "swarmscope"


def test_desktop_icon_is_in_resources():
    icon = parse_desktop(DESKTOP_FILE)["Desktop Entry"]["Icon"]
    assert "/" not in icon and "." not in icon, "a theme icon name, not a path"
    assert (ROOT / "resources" / "icons" / f"{icon}.svg").is_file()


def _metainfo():
    return ET.parse(METAINFO_FILE).getroot()


def test_metainfo_identity_matches_file_and_desktop_entry():
    root = _metainfo()
    assert root.tag == "component" and root.get("type") == "desktop-application"
    component_id = root.findtext("id")
    assert METAINFO_FILE.name == f"{component_id}.metainfo.xml"
    assert re.fullmatch(r"[a-z][a-z0-9_]*(\.[a-zA-Z0-9_]+){2,}", component_id), component_id
    launchable = root.find("launchable")
    assert launchable.get("type") == "desktop-id" and launchable.text == DESKTOP_FILE.name
    desktop = parse_desktop(DESKTOP_FILE)["Desktop Entry"]
    assert root.findtext("name") == desktop["Name"]
    assert root.findtext("icon[@type='stock']") == desktop["Icon"]
    assert root.find("provides/binary").text == desktop["TryExec"]


def test_metainfo_required_content():
    root = _metainfo()
    assert root.findtext("metadata_license") in {"CC0-1.0", "FSFAP", "MIT", "CC-BY-3.0",
                                                 "CC-BY-4.0", "CC-BY-SA-4.0"}
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert root.findtext("project_license") == pyproject["license"]["text"]
    summary = root.findtext("summary")
    assert 0 < len(summary) <= 100 and not summary.endswith("."), summary
    assert root.findall("description/p"), "description needs at least one paragraph"
    assert root.find("content_rating").get("type") == "oars-1.1"
    assert root.find("developer_name").text.strip()


def test_metainfo_lists_a_release_for_the_current_version():
    # A version bump without release notes shows up in software centres as an unknown version.
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    releases = [r.get("version") for r in _metainfo().findall("releases/release")]
    assert releases and releases[0] == version, (releases, version)
