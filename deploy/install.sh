#!/usr/bin/env bash
# Installs boxmaker as four systemd services, each under its own system user (SPEC §3.6):
#
#   sudo deploy/install.sh --owner LOGIN
#
# LOGIN is the person who runs `bxctl` and approves calls. The script installs bubblewrap
# (with apt-get, when it is missing), checks that it works for an unprivileged user, creates
# the users and groups, installs the code in /opt/boxmaker/venv, lays out the home folder
# /var/lib/boxmaker with the owners and modes docs/operations.md explains, and installs and
# enables the units. It starts nothing. Safe to run again: it upgrades the code and sets
# the owners and modes again, but never overwrites the owner's config, grants, keys or data.
set -euo pipefail

PREFIX=/opt/boxmaker
HOME_DIR=/var/lib/boxmaker
ETC_DIR=/etc/boxmaker
UNIT_DIR=/etc/systemd/system
BXCTL_LINK=/usr/local/bin/bxctl

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source_dir=$(dirname "$here")
owner=""
python=python3

usage() {
    cat <<EOF
usage: sudo $0 --owner LOGIN [--source DIR] [--python PYTHON]

  --owner LOGIN    the person who runs bxctl and approves calls (a normal login, not root)
  --source DIR     the boxmaker checkout to install (default: $source_dir)
  --python PYTHON  a Python 3.11 or newer for the virtual environment (default: python3)
EOF
}

die() { echo "install.sh: $*" >&2; exit 1; }
step() { echo "install.sh: $*"; }

while [ $# -gt 0 ]; do
    case "$1" in
        --owner) [ $# -ge 2 ] || die "--owner needs a value"; owner=$2; shift 2 ;;
        --source) [ $# -ge 2 ] || die "--source needs a value"; source_dir=$2; shift 2 ;;
        --python) [ $# -ge 2 ] || die "--python needs a value"; python=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done

# --- checks ------------------------------------------------------------------------------

[ "$(id -u)" -eq 0 ] || die "run it as root: sudo $0 --owner ${SUDO_USER:-LOGIN}"
[ -n "$owner" ] || { usage >&2; exit 2; }
id -u "$owner" >/dev/null 2>&1 || die "there is no user '$owner'"
[ "$(id -u "$owner")" -ne 0 ] || die "the owner must be a normal login, not root"
case "$owner" in boxmaker-*) die "the owner cannot be one of boxmaker's own users" ;; esac
owner_group=$(id -gn "$owner")
[ -d /run/systemd/system ] || die "systemd is not running on this machine; use \`bxctl up\` instead"
if [ ! -f "$source_dir/pyproject.toml" ] || [ ! -d "$source_dir/services/brokerd" ]; then
    die "$source_dir is not a boxmaker checkout (give one with --source DIR)"
fi
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
    || die "boxmaker needs Python 3.11 or newer; $python is $("$python" --version 2>&1 || echo missing) (give one with --python)"
for tool in setpriv useradd groupadd usermod systemd-tmpfiles; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is missing"
done

# --- bubblewrap, and unprivileged user namespaces -----------------------------------------

if ! command -v bwrap >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || die "install bubblewrap (the bwrap program), then run this again"
    step "installing bubblewrap with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
fi
bwrap=$(command -v bwrap)

# brokerd runs bwrap as the unprivileged user boxmaker-broker, with NoNewPrivileges=yes: a
# setuid bwrap would lose its privileges, so bwrap must work through unprivileged user
# namespaces. Try it the way brokerd does, as `nobody`.
step "checking that $bwrap works for an unprivileged user"
if ! probe=$(setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs \
    "$bwrap" --unshare-all --unshare-user --disable-userns --die-with-parent --new-session \
    --clearenv --cap-drop ALL --ro-bind /usr /usr --ro-bind-try /lib /lib \
    --ro-bind-try /lib64 /lib64 --ro-bind-try /bin /bin --proc /proc --dev /dev --tmpfs /tmp \
    /usr/bin/true 2>&1); then
    cat >&2 <<EOF
install.sh: bubblewrap does not work for an unprivileged user here:
  $probe
brokerd could not sandbox any tool call (every call would be answered
"sandbox unavailable"). The usual causes:
  - user namespaces are off: sysctl user.max_user_namespaces must be above 0, and on
    older Debian kernels kernel.unprivileged_userns_clone must be 1;
  - AppArmor restricts them (Ubuntu 23.10 and later:
    kernel.apparmor_restrict_unprivileged_userns = 1): bwrap needs a profile that
    allows "userns", or that sysctl set to 0;
  - bwrap is older than 0.8 (--disable-userns is needed): $("$bwrap" --version 2>&1)
Fix it, then run this script again. docs/operations.md has more.
EOF
    exit 1
fi
[ -u "$bwrap" ] && step "note: $bwrap is setuid root; under NoNewPrivileges=yes it runs without that, which works here"

# --- users and groups ----------------------------------------------------------------------

nologin=$(command -v nologin 2>/dev/null || echo /usr/sbin/nologin)
ensure_group() {
    getent group "$1" >/dev/null || { groupadd --system "$1"; step "created group $1"; }
}
ensure_user() {  # name, what it runs
    if getent passwd "$1" >/dev/null; then
        return
    fi
    if getent group "$1" >/dev/null; then
        useradd --system --gid "$1" --no-create-home --home-dir "$HOME_DIR" \
            --shell "$nologin" --comment "boxmaker $2" "$1"
    else
        useradd --system --user-group --no-create-home --home-dir "$HOME_DIR" \
            --shell "$nologin" --comment "boxmaker $2" "$1"
    fi
    step "created user $1"
}
ensure_group boxmaker         # every service and the owner: the home folder, broker.sock
ensure_group boxmaker-owner   # the owner's side (the owner, gatewayd): admin, loop, gateway
ensure_user boxmaker-broker brokerd
ensure_user boxmaker-memory memoryd
ensure_user boxmaker-loop loopd
ensure_user boxmaker-gateway gatewayd
# The services get their supplementary groups from their units (SupplementaryGroups=).
usermod --append --groups boxmaker,boxmaker-owner "$owner"

# --- the code ------------------------------------------------------------------------------

step "installing boxmaker from $source_dir into $PREFIX/venv"
install -d -o root -g root -m 0755 "$PREFIX"
[ -x "$PREFIX/venv/bin/python" ] || "$python" -m venv "$PREFIX/venv" \
    || die "cannot create a virtual environment (on Debian: apt-get install python3-venv)"
pip=("$PREFIX/venv/bin/python" -m pip -q --disable-pip-version-check)
"${pip[@]}" install --upgrade pip
"${pip[@]}" install "$source_dir"                                 # with its dependencies
"${pip[@]}" install --no-deps --force-reinstall "$source_dir"     # this checkout, always
# The sandbox cannot write bytecode, and brokerd cannot write under /opt: compile it now.
"$PREFIX/venv/bin/python" -m compileall -q "$PREFIX/venv/lib" >/dev/null || true
chmod -R a+rX,go-w "$PREFIX"

cat >"$BXCTL_LINK" <<EOF
#!/bin/sh
# Written by boxmaker's deploy/install.sh: bxctl, for the home folder of the services.
: "\${BX_HOME:=$HOME_DIR}"
export BX_HOME
exec $PREFIX/venv/bin/bxctl "\$@"
EOF
chmod 0755 "$BXCTL_LINK"

# --- the home folder -----------------------------------------------------------------------

# own USER:GROUP MODE PATH: never through a symbolic link (a service could have put one in
# a folder it may write, to make this script chown something else).
own() {
    [ -L "$3" ] && die "$3 is a symbolic link; refusing to change its owner (look at it first)"
    chown "$1" "$3"
    chmod "$2" "$3"
}
folder() {  # USER:GROUP MODE PATH, created when missing
    [ -L "$3" ] && die "$3 is a symbolic link; refusing to use it"
    [ -d "$3" ] || mkdir "$3"
    own "$@"
}

step "laying out $HOME_DIR"
install -d -o root -g boxmaker -m 0750 "$HOME_DIR"
if [ ! -e "$HOME_DIR/config.toml" ]; then
    install -o "$owner" -g boxmaker -m 0640 "$here/examples/config.toml" "$HOME_DIR/config.toml"
    step "wrote $HOME_DIR/config.toml (from deploy/examples/config.toml)"
fi
# bxctl init makes what is missing (key pairs, starter grants, folders) and overwrites nothing.
# It makes them the owner's alone (folders 0700, files 0600; run as root it gives a new
# workspace/ to [sandbox] user): the owners and modes below replace those.
"$PREFIX/venv/bin/bxctl" --home "$HOME_DIR" init --yes  # --yes: never the guided questions

folder root:boxmaker 0750 "$HOME_DIR"
own "$owner":boxmaker 0640 "$HOME_DIR/config.toml"
# grants: written by the owner, read by brokerd (the setgid bit gives new files its group).
folder "$owner":boxmaker-broker 2750 "$HOME_DIR/grants"
find "$HOME_DIR/grants" -maxdepth 1 -type f -name '*.toml' \
    -exec chown "$owner":boxmaker-broker {} + -exec chmod 0640 {} +
# jobs: written by the owner (`bxctl job add | rm`), read by brokerd (a run's grants), loopd
# (the schedule) and gatewayd (the Jobs view) through the services' group. Nothing but the
# owner writes them: a job file starts runs by itself.
folder "$owner":boxmaker 2750 "$HOME_DIR/jobs"
find "$HOME_DIR/jobs" -maxdepth 1 -type f -name '*.toml' \
    -exec chown "$owner":boxmaker {} + -exec chmod 0640 {} +
# keys: each secret key readable by its party only (loopd reads none of them).
folder root:boxmaker 0750 "$HOME_DIR/keys"
own "$owner":"$owner_group" 0600 "$HOME_DIR/keys/owner.key_secret"
own boxmaker-gateway:boxmaker-gateway 0600 "$HOME_DIR/keys/gatewayd.key_secret"
own boxmaker-broker:boxmaker-broker 0600 "$HOME_DIR/keys/brokerd.key_secret"
for party in owner gatewayd brokerd; do
    own root:boxmaker 0644 "$HOME_DIR/keys/$party.key"
done
# audit: brokerd writes the ledger; the owner's side reads it (`bxctl audit verify`).
# brokerd would create the ledger 0600, so it is made here, 0640, before brokerd starts.
folder boxmaker-broker:boxmaker-owner 2750 "$HOME_DIR/audit"
if [ ! -e "$HOME_DIR/audit/ledger.jsonl" ]; then
    install -o boxmaker-broker -g boxmaker-owner -m 0640 /dev/null "$HOME_DIR/audit/ledger.jsonl"
fi
own boxmaker-broker:boxmaker-owner 0640 "$HOME_DIR/audit/ledger.jsonl"
# Each service's own data, readable by that service only.
folder boxmaker-broker:boxmaker-broker 0700 "$HOME_DIR/state"
folder boxmaker-loop:boxmaker-loop 0700 "$HOME_DIR/sessions"
folder boxmaker-memory:boxmaker-memory 0700 "$HOME_DIR/memory"
# witness: the newest ledger head the owner's side saw, out of brokerd's reach. Sticky:
# gatewayd and the owner each replace only their own file.
folder root:boxmaker-owner 3770 "$HOME_DIR/witness"
# matrix: the phone channel's crypto store, sync position and memo (docs/matrix.md):
# gatewayd's alone, and 0700 (gatewayd refuses it otherwise).
folder boxmaker-gateway:boxmaker-gateway 0700 "$HOME_DIR/matrix"
# workspace: what the starter grants name. Tools run as boxmaker-broker; the owner's group
# can read and change what they write.
folder boxmaker-broker:boxmaker-owner 2770 "$HOME_DIR/workspace"
# run: only a mount point here; each unit mounts its private /run/boxmaker-<service> on it.
folder root:root 0700 "$HOME_DIR/run"
# logs: `bxctl up` writes there; under systemd the services log to the journal. Private
# like every folder `bxctl init` makes (`bxctl status` warns about one open to every user).
folder root:root 0700 "$HOME_DIR/logs"

# --- loopd's environment, the socket folders, the units ------------------------------------

install -d -o root -g root -m 0755 "$ETC_DIR"
if [ ! -e "$ETC_DIR/loopd.env" ]; then
    install -o root -g root -m 0600 "$here/examples/loopd.env" "$ETC_DIR/loopd.env"
    step "wrote $ETC_DIR/loopd.env (for the model's API key)"
fi
if [ ! -e "$ETC_DIR/gatewayd.env" ]; then
    install -o root -g root -m 0600 "$here/examples/gatewayd.env" "$ETC_DIR/gatewayd.env"
    step "wrote $ETC_DIR/gatewayd.env (for the phone channel's Matrix access token)"
fi

install -o root -g root -m 0644 "$here/tmpfiles.d/boxmaker.conf" /etc/tmpfiles.d/boxmaker.conf
systemd-tmpfiles --create /etc/tmpfiles.d/boxmaker.conf

for unit in "$here"/systemd/*.service "$here"/systemd/*.target; do
    install -o root -g root -m 0644 "$unit" "$UNIT_DIR/"
done
systemctl daemon-reload
systemctl enable boxmaker.target >/dev/null
step "installed and enabled boxmaker.target (brokerd, memoryd, loopd, gatewayd)"

running=""
systemctl is-active --quiet boxmaker.target && running=yes

cat <<EOF

boxmaker is installed. Next:

  1. Log out and in again as $owner, so that the groups boxmaker and boxmaker-owner
     apply; \`id\` shows them.
  2. Point loopd at your model: edit $HOME_DIR/config.toml, [model] (it is yours:
     owner $owner). An API key goes in $ETC_DIR/loopd.env (root only), named by
     [model] api_key_env.
  3. Add grants: bxctl grant add ... (examples in deploy/examples/grants). A folder
     outside $HOME_DIR needs OS permission for the user boxmaker-broker, and a
     writable one also a ReadWritePaths= drop-in: deploy/examples/brokerd-paths.conf.
  4. Start it: sudo systemctl start boxmaker.target
     and look:  systemctl status 'boxmaker-*'   journalctl -u 'boxmaker-*' -f
                bxctl grant check   bxctl audit verify

docs/operations.md explains all of this.
EOF
if [ -n "$running" ]; then
    echo
    echo "boxmaker is running the old code: sudo systemctl restart boxmaker.target"
fi
