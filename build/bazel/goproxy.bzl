"""Repository rules that fetch through the Go module proxy.

CI and developer machines reach only Debian apt, npm and the Go module proxy.
Stock rules_go and gazelle download their own sources, the Go SDK and helper
repositories from GitHub, dl.google.com and mirror.bazel.build, none of which
we can reach. Every Go module (rules_go and gazelle are Go modules too) and
every Go release (module golang.org/toolchain) is served by the proxy, so these
two rules turn proxy zips into Bazel repositories, pinned by sha256.

The proxy is the first http(s) entry of $GOPROXY, or of `go env GOPROXY` of the
Go on PATH when the variable is unset.
"""

def _proxy_base(rctx):
    value = rctx.os.environ.get("GOPROXY", "")
    if not value:
        go = rctx.which("go")
        if go:
            res = rctx.execute([go, "env", "GOPROXY"])
            if res.return_code == 0:
                value = res.stdout.strip()
    if not value:
        value = "https://proxy.golang.org"

    # GOPROXY is a list separated by "," or "|"; "direct" and "off" are not URLs.
    for entry in value.replace("|", ",").split(","):
        entry = entry.strip()
        if entry.startswith("https://") or entry.startswith("http://"):
            return entry.rstrip("/")
    fail("GOPROXY=%r names no http(s) module proxy; Plinth's Bazel build fetches everything through one" % value)

def _escape(s):
    # The proxy protocol spells upper-case letters as "!" + lower case so
    # that paths survive case-insensitive file systems.
    out = []
    for c in s.elems():
        if c.isupper():
            out.append("!" + c.lower())
        else:
            out.append(c)
    return "".join(out)

def _zip_url(rctx, module, version):
    return "%s/%s/@v/%s.zip" % (_proxy_base(rctx), _escape(module), _escape(version))

def _go_proxy_archive_impl(rctx):
    rctx.download_and_extract(
        url = _zip_url(rctx, rctx.attr.module, rctx.attr.version),
        sha256 = rctx.attr.sha256,
        stripPrefix = "%s@%s" % (rctx.attr.module, rctx.attr.version),
        type = "zip",
    )
    for patch in rctx.attr.patches:
        rctx.patch(patch, strip = 1)
    if rctx.attr.vendor_with:
        # Module zips never contain vendor/; gazelle's go_repository_tools
        # builds gazelle in GOPATH mode and needs one.
        go = str(rctx.path(rctx.attr.vendor_with))
        env = {
            "GOPROXY": _proxy_base(rctx),
            "GOPATH": str(rctx.path(".plinth-gopath")),
            "GOFLAGS": "-mod=mod -modcacherw",
            "GOTOOLCHAIN": "local",
            "HOME": str(rctx.path(".")),
        }
        rctx.report_progress("go mod vendor")
        res = rctx.execute([go, "mod", "vendor"], environment = env, timeout = 1200)
        if res.return_code != 0:
            fail("go mod vendor in %s@%s failed:\n%s%s" % (rctx.attr.module, rctx.attr.version, res.stdout, res.stderr))
        rctx.delete(".plinth-gopath")

go_proxy_archive = repository_rule(
    implementation = _go_proxy_archive_impl,
    doc = "A Go module's zip from the module proxy, optionally patched and vendored.",
    attrs = {
        "module": attr.string(mandatory = True, doc = "module path"),
        "version": attr.string(mandatory = True, doc = "module version"),
        "sha256": attr.string(mandatory = True, doc = "sha256 of the module zip"),
        "patches": attr.label_list(doc = "patches applied with -p1"),
        "vendor_with": attr.label(doc = "a go binary; if set, run `go mod vendor` after patching"),
    },
    environ = ["GOPROXY"],
)

def _go_proxy_sdk_impl(rctx):
    version = "v0.0.1-go%s.%s" % (rctx.attr.go_version, rctx.attr.platform)
    rctx.download_and_extract(
        url = _zip_url(rctx, "golang.org/toolchain", version),
        sha256 = rctx.attr.sha256,
        stripPrefix = "golang.org/toolchain@" + version,
        type = "zip",
    )

    # Zip entries carry no permissions; cmd/go marks these executable itself.
    res = rctx.execute(["sh", "-c", "chmod -R u+w . && chmod a+x bin/* pkg/tool/*/*"])
    if res.return_code != 0:
        fail("making the Go SDK executable: " + res.stderr)

    # rules_go v0.34 predates Go 1.20 and expects what older releases
    # shipped: a precompiled standard library in GOROOT/pkg/<os>_<arch> and
    # GOROOT/pkg/tool/<os>_<arch>/pack (gone since Go 1.22). Produce both once
    # here, so every build reuses them.
    root = str(rctx.path("."))
    env = {
        "GOROOT": root,
        "GODEBUG": "installgoroot=all",
        "GOTOOLCHAIN": "local",
        "GO111MODULE": "off",
        "GOFLAGS": "",
        "GOCACHE": root + "/.plinth-gocache",
        "CGO_ENABLED": "1",
    }
    rctx.report_progress("precompiling the Go %s standard library" % rctx.attr.go_version)
    for args in [
        ["install", "std"],
        # -trimpath: otherwise pack embeds this repository's absolute path;
        # as an input of every compile action it would then keep the disk
        # cache from being shared between checkouts. (The std archives record
        # $GOROOT-relative paths and are identical everywhere already.)
        ["install", "-trimpath", "cmd/pack"],
    ]:
        res = rctx.execute([root + "/bin/go"] + args, environment = env, timeout = 3600)
        if res.return_code != 0:
            fail("go %s:\n%s%s" % (" ".join(args), res.stdout, res.stderr))
    rctx.delete(".plinth-gocache")
    rctx.file("BUILD.bazel", 'exports_files(glob(["**"], exclude = ["src/**/testdata/**"]))\n')

go_proxy_sdk = repository_rule(
    implementation = _go_proxy_sdk_impl,
    doc = "A Go release from the proxy's golang.org/toolchain module, with std precompiled. Wrap it with go_wrap_sdk.",
    attrs = {
        "go_version": attr.string(mandatory = True, doc = "e.g. 1.26.8"),
        "platform": attr.string(default = "linux-amd64"),
        "sha256": attr.string(mandatory = True, doc = "sha256 of the toolchain module zip"),
    },
    environ = ["GOPROXY"],
)
