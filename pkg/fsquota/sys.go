package fsquota

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Kernel ABI that golang.org/x/sys/unix does not wrap (checked against
// linux/fs.h, linux/quota.h and linux/dqblk_xfs.h).
const (
	fsIocFsgetxattr = 0x801c581f // _IOR('X', 31, struct fsxattr)
	fsIocFssetxattr = 0x401c5820 // _IOW('X', 32, struct fsxattr)

	xflagProjInherit = 0x200 // FS_XFLAG_PROJINHERIT

	prjQuota = 2 // PRJQUOTA

	qXGetQuota     = 'X'<<8 + 3 // Q_XGETQUOTA
	qXSetQLim      = 'X'<<8 + 4 // Q_XSETQLIM
	qXGetQStatV    = 'X'<<8 + 8 // Q_XGETQSTATV
	qXGetNextQuota = 'X'<<8 + 9 // Q_XGETNEXTQUOTA

	fsDquotVersion  = 1 // FS_DQUOT_VERSION
	fsQStatVVersion = 1 // FS_QSTATV_VERSION1
	fsProjQuota     = 2 // FS_PROJ_QUOTA (fs_disk_quota.d_flags)

	dqBSoft = 1 << 2 // FS_DQ_BSOFT
	dqBHard = 1 << 3 // FS_DQ_BHARD
	dqISoft = 1 << 0 // FS_DQ_ISOFT
	dqIHard = 1 << 1 // FS_DQ_IHARD

	quotaPDQAcct = 1 << 4 // FS_QUOTA_PDQ_ACCT
	quotaPDQEnfd = 1 << 5 // FS_QUOTA_PDQ_ENFD

	// The Q_X* interface counts space in 512-byte "basic blocks".
	basicBlock = 512

	// XFS_IOC_FSGEOMETRY_V1, _IOR('X', 100, struct xfs_fsop_geom_v1),
	// from xfs/xfs_fs.h: the oldest form of the geometry call, which
	// every kernel that has XFS answers.
	xfsIocFsgeometryV1 = 0x80705864
	// XFS_FSOP_GEOM_FLAGS_PROJID32: the filesystem stores 32-bit project
	// IDs. Version 5 filesystems (mkfs.xfs's default since 2015) always
	// do; a version 4 one only when made with -i projid32bit=1.
	xfsGeomFlagsProjID32 = 1 << 11
)

func qcmd(cmd, typ int) int { return cmd<<8 | typ&0xff }

// fsxattr mirrors struct fsxattr (28 bytes).
type fsxattr struct {
	Xflags     uint32
	Extsize    uint32
	Nextents   uint32
	Projid     uint32
	Cowextsize uint32
	Pad        [8]byte
}

// fsDiskQuota mirrors struct fs_disk_quota (112 bytes).
type fsDiskQuota struct {
	Version      int8
	Flags        int8
	Fieldmask    uint16
	ID           uint32
	BlkHardlimit uint64
	BlkSoftlimit uint64
	InoHardlimit uint64
	InoSoftlimit uint64
	Bcount       uint64
	Icount       uint64
	Itimer       int32
	Btimer       int32
	Iwarns       uint16
	Bwarns       uint16
	ItimerHi     int8
	BtimerHi     int8
	RtbtimerHi   int8
	Padding2     int8
	RtbHardlimit uint64
	RtbSoftlimit uint64
	Rtbcount     uint64
	Rtbtimer     int32
	Rtbwarns     uint16
	Padding3     int16
	Padding4     [8]byte
}

// fsQFileStatV mirrors struct fs_qfilestatv (24 bytes).
type fsQFileStatV struct {
	Ino      uint64
	Nblks    uint64
	Nextents uint32
	Pad      uint32
}

// fsQuotaStatV mirrors struct fs_quota_statv (160 bytes).
type fsQuotaStatV struct {
	Version      int8
	Pad1         uint8
	Flags        uint16
	Incoredqs    uint32
	UQuota       fsQFileStatV
	GQuota       fsQFileStatV
	PQuota       fsQFileStatV
	Btimelimit   int32
	Itimelimit   int32
	Rtbtimelimit int32
	Bwarnlimit   uint16
	Iwarnlimit   uint16
	Rtbwarnlimit uint16
	Pad3         uint16
	Pad4         uint32
	Pad2         [7]uint64
}

// xfsFsopGeomV1 mirrors struct xfs_fsop_geom_v1 (112 bytes).
type xfsFsopGeomV1 struct {
	Blocksize    uint32
	Rtextsize    uint32
	Agblocks     uint32
	Agcount      uint32
	Logblocks    uint32
	Sectsize     uint32
	Inodesize    uint32
	Imaxpct      uint32
	Datablocks   uint64
	Rtblocks     uint64
	Rtextents    uint64
	Logstart     uint64
	UUID         [16]byte
	Sunit        uint32
	Swidth       uint32
	Version      int32
	Flags        uint32
	Logsectsize  uint32
	Rtsectsize   uint32
	Dirblocksize uint32
	Pad          uint32
}

// Compile-time size checks against the C structs.
var (
	_ [28]byte  = [unsafe.Sizeof(fsxattr{})]byte{}
	_ [112]byte = [unsafe.Sizeof(fsDiskQuota{})]byte{}
	_ [160]byte = [unsafe.Sizeof(fsQuotaStatV{})]byte{}
	_ [112]byte = [unsafe.Sizeof(xfsFsopGeomV1{})]byte{}
	_ [92]byte  = [unsafe.Offsetof(xfsFsopGeomV1{}.Flags)]byte{}
)

func ioctl(fd uintptr, req uintptr, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, fd, req, uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}

// quotactlFd is quotactl_fd(2) (Linux >= 5.14): quotactl addressed by any
// open file of the filesystem instead of its block device path, which
// spares us from mapping a directory to a device through mountinfo.
func quotactlFd(fd uintptr, cmd int, id uint32, addr unsafe.Pointer) error {
	_, _, e := unix.Syscall6(unix.SYS_QUOTACTL_FD, fd, uintptr(cmd), uintptr(id), uintptr(addr), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func getXattr(fd uintptr) (fsxattr, error) {
	var x fsxattr
	err := ioctl(fd, fsIocFsgetxattr, unsafe.Pointer(&x))
	return x, err
}

func setXattr(fd uintptr, x *fsxattr) error {
	return ioctl(fd, fsIocFssetxattr, unsafe.Pointer(x))
}

// xfsGeometry reads the geometry of the XFS holding fd.
func xfsGeometry(fd uintptr) (xfsFsopGeomV1, error) {
	var g xfsFsopGeomV1
	err := ioctl(fd, xfsIocFsgeometryV1, unsafe.Pointer(&g))
	return g, err
}
