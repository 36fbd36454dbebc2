//go:build !amd64 && !arm64

package seccomp

// abis is empty where no filter is written: DenyIoctls says so.
var abis []syscallABI

const lowWord = 0
