# Sourced by scripts that fetch packages of another architecture (arm64 on an
# x86 host): a private package index of that arch in a temporary directory,
# built from the host's own apt sources. The host's apt lists, dpkg
# architectures and installed packages stay as they are.
#
#   foreign_apt_init <debian arch> <work dir>   fills the array foreign_apt
#   apt-get "${foreign_apt[@]}" download <package>...
foreign_apt_init() {
  local arch=$1 dir=$2
  foreign_apt=(-qq -o Dir::State::Lists="$dir/lists" -o Dir::Cache="$dir/cache" -o APT::Architecture="$arch"
               -o APT::Architectures::="$arch" -o APT::Sandbox::User=root)
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
  apt-get "${foreign_apt[@]}" update
}
