#!/usr/bin/env bash
# Installs swarmscope's desktop entry, AppStream metainfo and icons for the current user, so it
# appears in the desktop's app menu and starts the window with the default model.
#
# Usage: packaging/install_desktop.sh [--exec PROGRAM] [--uninstall]
#   --exec PROGRAM  what the menu entry runs (default: this checkout's .venv/bin/swarmscope;
#                   give dist/swarmscope/swarmscope to install the bundle instead)
#   --uninstall     remove what an install put there
# Installs under $XDG_DATA_HOME (default ~/.local/share).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
program=$root/.venv/bin/swarmscope
uninstall=0
while [ $# -gt 0 ]; do
    case $1 in
        --exec) program=${2:?--exec needs a program}; shift 2 ;;
        --uninstall) uninstall=1; shift ;;
        *) echo "install_desktop.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

data=${XDG_DATA_HOME:-$HOME/.local/share}
apps=$data/applications
hicolor=$data/icons/hicolor
metainfo=$data/metainfo
entry=swarmscope.desktop
appdata=io.github.swarmscope.metainfo.xml
sizes=(16 32 48 64 128 256 512)

refresh_icon_cache() {
    # Desktops watch applications/ themselves. An icon cache is refreshed only where one exists:
    # creating one in a user's hicolor/ would hide icons that later installs add without it.
    if [ -f "$hicolor/icon-theme.cache" ] && command -v gtk-update-icon-cache >/dev/null; then
        gtk-update-icon-cache -q -t "$hicolor" || true
    fi
}

if [ "$uninstall" = 1 ]; then
    rm -f "$apps/$entry" "$metainfo/$appdata" "$hicolor/scalable/apps/swarmscope.svg"
    for size in "${sizes[@]}"; do rm -f "$hicolor/${size}x${size}/apps/swarmscope.png"; done
    refresh_icon_cache
    echo "removed swarmscope from $data"
    exit 0
fi

program=$(realpath -m "$program")
if [ ! -x "$program" ]; then
    echo "install_desktop.sh: $program is not an executable; run 'make setup' (or build the bundle) first" >&2
    exit 1
fi
# Exec quotes the path; these characters would need escaping rules that no path should need.
case $program in
    *[\"\`\$\\%]*) echo "install_desktop.sh: $program: path contains one of \" \` \$ \\ %" >&2; exit 1 ;;
esac

mkdir -p "$apps" "$metainfo" "$hicolor/scalable/apps"
sed -e "s|^Exec=swarmscope |Exec=\"$program\" |" -e "s|^TryExec=swarmscope\$|TryExec=$program|" \
    "$root/packaging/$entry" > "$apps/$entry.tmp"
grep -q "^Exec=\"$program\" " "$apps/$entry.tmp" || { echo "install_desktop.sh: Exec line not rewritten" >&2; exit 1; }
mv "$apps/$entry.tmp" "$apps/$entry"
if command -v desktop-file-validate >/dev/null; then desktop-file-validate "$apps/$entry"; fi
install -m 644 "$root/packaging/$appdata" "$metainfo/$appdata"

install -m 644 "$root/resources/icons/swarmscope.svg" "$hicolor/scalable/apps/swarmscope.svg"
for size in "${sizes[@]}"; do
    mkdir -p "$hicolor/${size}x${size}/apps"
    install -m 644 "$root/resources/icons/swarmscope-$size.png" "$hicolor/${size}x${size}/apps/swarmscope.png"
done
refresh_icon_cache
echo "installed $apps/$entry -> $program"
