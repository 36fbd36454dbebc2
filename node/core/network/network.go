// Package network brings up a booted node's network: lo, the uplink's
// address and default route, and the node IP on lo.
//
// A node has one uplink and a fixed address from its configuration disk
// (no DHCP client in the image), so the whole job is four kernel requests.
// They are made over rtnetlink with raw syscalls (golang.org/x/sys/unix)
// rather than through a netlink library or the ip tool: the image carries
// neither, and the requests are few and fixed.
//
// Configure is idempotent: an address or route that is already there is
// fine, so a restarted runnable (or a second boot of the same process tree)
// converges instead of failing.
package network

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Config is what Configure sets up.
type Config struct {
	// Uplink is the name of the link to the outside, e.g. "eth0".
	Uplink string
	// Address is the uplink's address and prefix, e.g. 10.0.2.15/24.
	Address netip.Prefix
	// Gateway is the default route's next hop, in Address's subnet.
	Gateway netip.Addr
	// NodeIP, if valid, is added to lo as a /32: an address of the node
	// that no link owns, so it is reachable whichever way packets arrive
	// (the host forwards it), and the kubelet can serve on it.
	NodeIP netip.Addr
}

// Configure brings lo and the uplink up, gives the uplink its address, adds
// the default route and the node IP.
func Configure(c Config) error {
	if !c.Address.Addr().Is4() || !c.Gateway.Is4() || (c.NodeIP.IsValid() && !c.NodeIP.Is4()) {
		return errors.New("configuring network: only IPv4 is supported")
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return fmt.Errorf("configuring network: %w", err)
	}
	up, err := net.InterfaceByName(c.Uplink)
	if err != nil {
		return fmt.Errorf("configuring network: uplink %s: %w (links: %s)", c.Uplink, err, linkNames())
	}
	nl, err := dial()
	if err != nil {
		return fmt.Errorf("configuring network: %w", err)
	}
	defer unix.Close(nl)
	steps := []struct {
		what string
		do   func() error
	}{
		{"bringing lo up", func() error { return setUp(nl, lo.Index) }},
		{"bringing " + c.Uplink + " up", func() error { return setUp(nl, up.Index) }},
		{fmt.Sprintf("adding %s to %s", c.Address, c.Uplink), func() error { return addAddress(nl, up.Index, c.Address) }},
		{fmt.Sprintf("adding default route via %s", c.Gateway), func() error { return addDefaultRoute(nl, up.Index, c.Gateway) }},
	}
	if c.NodeIP.IsValid() {
		p := netip.PrefixFrom(c.NodeIP, 32)
		steps = append(steps, struct {
			what string
			do   func() error
		}{fmt.Sprintf("adding node IP %s to lo", p), func() error { return addAddress(nl, lo.Index, p) }})
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("configuring network: %s: %w", s.what, err)
		}
	}
	return nil
}

func linkNames() []string {
	ifs, _ := net.Interfaces()
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	return names
}

// dial opens a route netlink socket.
func dial() (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return -1, fmt.Errorf("opening rtnetlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("binding rtnetlink socket: %w", err)
	}
	return fd, nil
}

// attr is one rtnetlink attribute.
type attr struct {
	typ  uint16
	data []byte
}

func align4(n int) int { return (n + 3) &^ 3 }

// request sends one rtnetlink request (header + fixed body + attributes)
// and waits for its acknowledgement. An EEXIST answer is success: the
// state asked for is there already.
func request(fd int, typ, flags uint16, body []byte, attrs ...attr) error {
	msg := make([]byte, unix.SizeofNlMsghdr, 256)
	msg = append(msg, body...)
	for _, a := range attrs {
		for len(msg)%4 != 0 {
			msg = append(msg, 0)
		}
		h := make([]byte, unix.SizeofRtAttr)
		binary.NativeEndian.PutUint16(h[0:], uint16(unix.SizeofRtAttr+len(a.data)))
		binary.NativeEndian.PutUint16(h[2:], a.typ)
		msg = append(append(msg, h...), a.data...)
	}
	for len(msg)%4 != 0 {
		msg = append(msg, 0)
	}
	const seq = 1
	hdr := unix.NlMsghdr{Len: uint32(len(msg)), Type: typ, Flags: unix.NLM_F_REQUEST | unix.NLM_F_ACK | flags, Seq: seq}
	copy(msg, (*[unix.SizeofNlMsghdr]byte)(unsafe.Pointer(&hdr))[:])
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("sending rtnetlink request: %w", err)
	}
	buf := make([]byte, 4096)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading rtnetlink answer: %w", err)
		}
		for b := buf[:n]; len(b) >= unix.SizeofNlMsghdr; {
			l := int(binary.NativeEndian.Uint32(b[0:4]))
			if l < unix.SizeofNlMsghdr || l > len(b) {
				return errors.New("malformed rtnetlink answer")
			}
			mtype := binary.NativeEndian.Uint16(b[4:6])
			mseq := binary.NativeEndian.Uint32(b[8:12])
			data := b[unix.SizeofNlMsghdr:l]
			b = b[min(align4(l), len(b)):]
			if mseq != seq || mtype != unix.NLMSG_ERROR {
				continue
			}
			if len(data) < 4 {
				return errors.New("short rtnetlink error message")
			}
			code := int32(binary.NativeEndian.Uint32(data[:4]))
			if code == 0 || unix.Errno(-code) == unix.EEXIST {
				return nil
			}
			return unix.Errno(-code)
		}
	}
}

// setUp sets IFF_UP on the link with index idx.
func setUp(fd, idx int) error {
	msg := unix.IfInfomsg{Family: unix.AF_UNSPEC, Index: int32(idx), Flags: unix.IFF_UP, Change: unix.IFF_UP}
	body := (*[unix.SizeofIfInfomsg]byte)(unsafe.Pointer(&msg))[:]
	return request(fd, unix.RTM_NEWLINK, 0, body)
}

// addAddress adds p to the link with index idx.
func addAddress(fd, idx int, p netip.Prefix) error {
	msg := unix.IfAddrmsg{Family: unix.AF_INET, Prefixlen: uint8(p.Bits()), Index: uint32(idx)}
	body := (*[unix.SizeofIfAddrmsg]byte)(unsafe.Pointer(&msg))[:]
	a := p.Addr().AsSlice()
	return request(fd, unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL, body,
		attr{unix.IFA_LOCAL, a}, attr{unix.IFA_ADDRESS, a})
}

// addDefaultRoute adds 0.0.0.0/0 via gw out of the link with index idx.
func addDefaultRoute(fd, idx int, gw netip.Addr) error {
	msg := unix.RtMsg{
		Family:   unix.AF_INET,
		Table:    unix.RT_TABLE_MAIN,
		Protocol: unix.RTPROT_BOOT,
		Scope:    unix.RT_SCOPE_UNIVERSE,
		Type:     unix.RTN_UNICAST,
	}
	body := (*[unix.SizeofRtMsg]byte)(unsafe.Pointer(&msg))[:]
	oif := make([]byte, 4)
	binary.NativeEndian.PutUint32(oif, uint32(idx))
	return request(fd, unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_EXCL, body,
		attr{unix.RTA_GATEWAY, gw.AsSlice()}, attr{unix.RTA_OIF, oif})
}
