// Wrapper module for the LeaderWorkerSet controller. build.sh copies it into
// the cache and adds `require sigs.k8s.io/lws <LWS_VERSION>` before tidying:
// `go install sigs.k8s.io/lws/cmd@version` fails on the proxy here because it
// also asks for the module's version list (for deprecation notices), which
// the proxy refuses for this module.
module disagg.invalid/controlplane/lws

go 1.26.0

tool sigs.k8s.io/lws/cmd
