# Sourced by the scripts: where the world lives, and the toolchains where their installers
# put them, in case this shell's PATH lacks them (CI's may).
export KWORLD_DIR=${KWORLD_DIR:-/var/tmp/kraft-world}
for d in "$HOME/.cargo/bin" /usr/local/go/bin; do
  case ":$PATH:" in *":$d:"*) ;; *) [ -d "$d" ] && PATH="$d:$PATH" ;; esac
done
export PATH
