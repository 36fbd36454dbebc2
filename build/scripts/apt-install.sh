#!/usr/bin/env bash
# apt-install.sh PKG... — installs the Debian packages that are not installed yet.
#
# Every make target calls this for what it needs, so a fresh machine (CI, a
# newcomer) gets everything from the project's own files. It is idempotent and
# cheap when nothing is missing (dpkg-query only), and serialised with flock so
# parallel targets never fight over the dpkg lock.
set -euo pipefail
missing=()
for p in "$@"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
exec 9>/tmp/plinth-apt.lock
flock 9
echo "apt-install: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# A stale package list makes installs fail with 404s; refresh at most once an hour.
stamp=/var/lib/apt/periodic/plinth-update-stamp
if [ ! -f "$stamp" ] || [ -n "$(find "$stamp" -mmin +60 2>/dev/null)" ]; then
	$sudo apt-get -o DPkg::Lock::Timeout=600 update -qq
	$sudo mkdir -p "$(dirname "$stamp")" && $sudo touch "$stamp"
fi
$sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
