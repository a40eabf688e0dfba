# Sourced by scripts/install-deps.sh and scripts/install-test-deps.sh: install what is missing,
# without asking anything and without reading standard input (CI), as root or through sudo.

# install_debian PACKAGE...: apt-get installs the packages not installed yet (by dpkg's status).
install_debian() {
  local missing=() p sudo=""
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing (Debian): ${missing[*]}" >&2
  # `env`, not an exported variable: sudo does not pass the caller's environment on.
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null >/dev/null
}

# install_python CHECK REQUIREMENT [CHECK REQUIREMENT]...: pip-installs each REQUIREMENT whose
# CHECK (Python code, run by python3) fails. PIP_BREAK_SYSTEM_PACKAGES: Debian 12's own python3
# is "externally managed" (PEP 668), and pip refuses to install into it without this.
install_python() {
  local missing=()
  while [ $# -ge 2 ]; do
    python3 -c "$1" 2>/dev/null || missing+=("$2")
    shift 2
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  echo "installing (PyPI): ${missing[*]}" >&2
  PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q "${missing[@]}" </dev/null >&2
}
