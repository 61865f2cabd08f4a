#!/usr/bin/env bash
# Install ftwiz-agent on this node as a hardened systemd service. Safe to run again (upgrade).
#
#   sudo installers/install-agent.sh --user trainer --token-from /path/to/cluster/agent.token
#
# Steps: a venv under PREFIX with the agent installed from SOURCE; the token at /etc/ftwiz/agent.token
# (mode 0600, owned by USER; copied from --token-from, else generated once and never overwritten);
# /etc/ftwiz/agent.env with the agent's options; the unit and a User= drop-in; enable and (re)start.
# Every node of a cluster and the controller must share one token file: generate it on one machine
# (`ftwiz-agent token PATH`) and pass it to every node with --token-from.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: install-agent.sh [options]
  --user USER          user that runs training and the agent (default: $SUDO_USER, else the current user)
  --token-from FILE    copy this cluster token instead of generating a new one
  --node-name NAME     node name in the cluster config (default: short hostname)
  --python PATH        training interpreter whose versions are reported (default: the agent venv's python)
  --disk-path PATH     report free space at PATH; repeatable (default: USER's home)
  --port PORT          agent port (default: 8462)
  --source PATH        what pip installs (default: the project folder holding this script)
  --prefix DIR         install folder (default: /opt/ftwiz-agent; the venv is DIR/venv)
  --venv DIR           use this existing venv as it is (not created, not staged under --root)
  --skip-pip           do not (re)install the package into the venv
  --root DIR           write everything under DIR (staging or tests); implies --no-start
  --no-start           install and enable nothing in systemd, only write the files
  --tls                serve HTTPS only: make a self-signed certificate for this node's names and addresses
                       once (/etc/ftwiz/agent.crt, key agent.key 0600; kept on later runs) and print where it is
USAGE
}

die() { printf 'install-agent.sh: %s\n' "$1" >&2; exit 2; }

script_dir="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
run_user="${SUDO_USER:-$(id -un)}"
token_from=""
node_name="$(hostname -s 2>/dev/null || hostname)"
training_python=""
disk_paths=()
port="8462"
source_dir="$(dirname -- "$script_dir")"
prefix="/opt/ftwiz-agent"
venv=""
skip_pip=0
root=""
start=1
tls=0

while [ "$#" -gt 0 ]; do
  case "$1" in
    --user) run_user="${2:?--user needs a value}"; shift 2 ;;
    --token-from) token_from="${2:?--token-from needs a file}"; shift 2 ;;
    --node-name) node_name="${2:?--node-name needs a value}"; shift 2 ;;
    --python) training_python="${2:?--python needs a path}"; shift 2 ;;
    --disk-path) disk_paths+=("${2:?--disk-path needs a path}"); shift 2 ;;
    --port) port="${2:?--port needs a number}"; shift 2 ;;
    --source) source_dir="${2:?--source needs a path}"; shift 2 ;;
    --prefix) prefix="${2:?--prefix needs a folder}"; shift 2 ;;
    --venv) venv="${2:?--venv needs a folder}"; shift 2 ;;
    --skip-pip) skip_pip=1; shift ;;
    --root) root="${2:?--root needs a folder}"; start=0; shift 2 ;;
    --no-start) start=0; shift ;;
    --tls) tls=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown option: $1" ;;
  esac
done

# venv: the path the unit runs; venv_on_disk: where this run finds it (staged under --root).
if [ -n "$venv" ]; then
  venv_on_disk="$venv"
  [ -x "$venv/bin/python" ] || die "--venv $venv has no bin/python: pass an existing venv, or drop --venv"
else
  venv="$prefix/venv"
  venv_on_disk="$root$venv"
fi
run_group="$(id -gn -- "$run_user" 2>/dev/null)" || die "user '$run_user' does not exist: create it, or pass --user with the training user"
run_home="$(getent passwd -- "$run_user" | cut -d: -f6)"
[ "${#disk_paths[@]}" -gt 0 ] || disk_paths=("${run_home:-/}")
[ -n "$training_python" ] || training_python="$venv/bin/python"
case "$port" in ''|*[!0-9]*) die "--port must be a number, not '$port'" ;; esac
[ "$port" -ge 1 ] && [ "$port" -le 65535 ] || die "--port must be 1-65535, not $port"
# systemd splits $FTWIZ_AGENT_ARGS on whitespace and the unit names the venv unquoted.
for value in "$node_name" "$training_python" "$venv" "${disk_paths[@]}"; do
  case "$value" in *[[:space:]\"\'\\\$]*) die "'$value' contains whitespace, quotes, \\ or \$, which the unit cannot carry; choose a plain path or name" ;; esac
done
if [ -z "$root" ] && [ "$(id -u)" -ne 0 ]; then
  die "run as root (sudo): it writes /etc/ftwiz and /etc/systemd/system; or pass --root DIR to stage the files"
fi

etc_dir="$root/etc/ftwiz"
unit_dir="$root/etc/systemd/system"
token_file="$etc_dir/agent.token"

# Write $2 to file $1 with mode $3 only if the content changed; print whether it did.
write_if_changed() {
  local target="$1" content="$2" mode="$3" temporary
  temporary="$(mktemp "$(dirname -- "$target")/.install-agent.XXXXXX")"
  printf '%s\n' "$content" > "$temporary"
  chmod "$mode" "$temporary"
  if [ -f "$target" ] && cmp -s "$temporary" "$target"; then
    rm -f -- "$temporary"
    printf 'unchanged %s\n' "$target"
  else
    mv -f -- "$temporary" "$target"
    printf 'wrote     %s\n' "$target"
  fi
}

# 1. The venv and the package.
if [ ! -x "$venv_on_disk/bin/python" ]; then
  python3 -m venv -- "$venv_on_disk" || die "python3 -m venv failed: install the python3-venv package"
fi
if [ "$skip_pip" -eq 0 ]; then
  "$venv_on_disk/bin/python" -m pip install --quiet --upgrade -- "$source_dir"
fi
agent_bin="$venv_on_disk/bin/ftwiz-agent"
[ -x "$agent_bin" ] || die "$agent_bin is missing: the package did not install (drop --skip-pip?)"

# 2. The token: copied from the cluster's file, or generated once; never replaced silently.
install -d -m 0755 -- "$etc_dir"
if [ -n "$token_from" ]; then
  [ -r "$token_from" ] || die "cannot read --token-from $token_from"
  if [ -f "$token_file" ] && cmp -s -- "$token_from" "$token_file"; then
    printf 'unchanged %s\n' "$token_file"
  else
    install -m 0600 -- "$token_from" "$token_file"
    printf 'wrote     %s\n' "$token_file"
  fi
elif [ -f "$token_file" ]; then
  printf 'kept      %s\n' "$token_file"
else
  "$agent_bin" token "$token_file"
fi
chmod 0600 -- "$token_file"
if [ -z "$root" ]; then
  chown -- "$run_user:$run_group" "$token_file"
fi

# 3. With --tls: a self-signed certificate for every name and address of this node, made once.
if [ "$tls" -eq 1 ]; then
  command -v openssl >/dev/null || die "--tls needs openssl: install the openssl package"
  cert_file="$etc_dir/agent.crt"
  key_file="$etc_dir/agent.key"
  if [ -f "$cert_file" ] && [ -f "$key_file" ]; then
    printf 'kept      %s\n' "$cert_file"
  else
    names="DNS:localhost,IP:127.0.0.1,IP:::1"
    for name in "$node_name" "$(hostname -s 2>/dev/null || true)" "$(hostname -f 2>/dev/null || true)"; do
      case "$name" in ''|*[!A-Za-z0-9.-]*) ;; *) names="$names,DNS:$name" ;; esac
    done
    for address in $(hostname -I 2>/dev/null || true); do
      case "$address" in *[!0-9A-Fa-f.:]*|'') ;; *) names="$names,IP:$address" ;; esac
    done
    (umask 077 && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
      -subj "/CN=$node_name" -addext "subjectAltName=$names" -keyout "$key_file" -out "$cert_file" 2>/dev/null) \
      || die "openssl could not make the certificate (it needs OpenSSL 1.1.1 or newer for -addext)"
    chmod 0644 -- "$cert_file"
    printf 'wrote     %s (for %s)\n' "$cert_file" "$names"
  fi
  chmod 0600 -- "$key_file"
  if [ -z "$root" ]; then
    chown -- "$run_user:$run_group" "$key_file"
  fi
  printf 'TLS certificate of this node: %s (%s)\n' "$cert_file" "$(openssl x509 -in "$cert_file" -noout -fingerprint -sha256)"
  printf 'append it to the controller'"'"'s [cluster] agent_ca_file and set agent_tls = true\n'
fi

# 4. Options for the unit's ExecStart.
args=(--host 0.0.0.0 --port "$port" --node-name "$node_name" --python "$training_python")
for path in "${disk_paths[@]}"; do
  args+=(--disk-path "$path")
done
if [ "$tls" -eq 1 ]; then
  args+=(--tls-cert /etc/ftwiz/agent.crt --tls-key /etc/ftwiz/agent.key)
fi
write_if_changed "$etc_dir/agent.env" "# Written by install-agent.sh; the unit passes these to ftwiz-agent serve.
FTWIZ_AGENT_ARGS=${args[*]}" 0644

# 5. The unit (pointing at this venv) and the User= drop-in.
install -d -m 0755 -- "$unit_dir" "$unit_dir/ftwiz-agent.service.d"
unit="$(cat -- "$script_dir/ftwiz-agent.service")"
unit="${unit//\/opt\/ftwiz-agent\/venv/$venv}"
write_if_changed "$unit_dir/ftwiz-agent.service" "$unit" 0644
write_if_changed "$unit_dir/ftwiz-agent.service.d/user.conf" "# Written by install-agent.sh: the agent runs as the training user (see the unit's header).
[Service]
User=$run_user
Group=$run_group" 0644

# 6. Enable and (re)start.
if [ "$start" -eq 1 ]; then
  systemctl daemon-reload
  systemctl enable --quiet ftwiz-agent.service
  systemctl restart ftwiz-agent.service
  if [ "$tls" -eq 1 ]; then
    printf 'ftwiz-agent is running on port %s (HTTPS only) as %s; check it with: curl -s --cacert /etc/ftwiz/agent.crt https://127.0.0.1:%s/healthz\n' "$port" "$run_user" "$port"
  else
    printf 'ftwiz-agent is running on port %s as %s; check it with: curl -s http://127.0.0.1:%s/healthz\n' "$port" "$run_user" "$port"
  fi
else
  printf 'files written; start with: systemctl daemon-reload && systemctl enable --now ftwiz-agent\n'
fi
