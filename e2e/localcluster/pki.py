"""Certificates and keys for the local control plane.

One CA signs everything: the apiserver serving certificate, and client
certificates whose subject carries the Kubernetes identity (CN = user,
O = groups). The service-account signing key is a separate RSA pair.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=365)
# The first address of --service-cluster-ip-range is the `kubernetes` Service IP,
# which in-cluster clients use; keep it in the serving certificate.
# A /16 like real clusters': a /24 runs out after ~250 Services, which the operator benchmark reaches.
SERVICE_CIDR = "10.0.0.0/16"
KUBERNETES_SERVICE_IP = "10.0.0.1"
APISERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
# The real node's bridge address (network.NODE_IP), where the API server listens when the cluster has a real node.
NODE_IP = "198.18.0.1"
APISERVER_IPS = ("127.0.0.1", KUBERNETES_SERVICE_IP, NODE_IP)
REAL_NODE_NAME = "real-0"

# Client identities: file stem -> (user, groups). The controller-manager and
# scheduler use the identities that the bootstrap RBAC policy grants their
# permissions to, as on a kubeadm cluster; admin and kwok get system:masters.
CLIENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "admin": ("kubernetes-admin", ("system:masters",)),
    "controller-manager": ("system:kube-controller-manager", ()),
    "scheduler": ("system:kube-scheduler", ()),
    "kwok": ("kwok-controller", ("system:masters",)),
    # Out-of-cluster LeaderWorkerSet controller; its chart's RBAC is not installed.
    "lws": ("lws-controller", ("system:masters",)),
    # The real node, with the identities the Node authorizer and the bootstrap policy (system:node-proxier)
    # expect, as on a kubeadm node.
    "kubelet": (f"system:node:{REAL_NODE_NAME}", ("system:nodes",)),
    "kube-proxy": ("system:kube-proxy", ()),
    # The API server's identity towards kubelets (logs, exec, port-forward).
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", ("system:masters",)),
    # Cluster DNS, a harness process like kwok.
    "coredns": ("coredns", ("system:masters",)),
}

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True)
class Pki:
    """Paths of the generated PKI files."""

    dir: Path

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def apiserver_cert(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def apiserver_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def webhook_cert(self) -> Path:
        return self.dir / "webhook.crt"

    @property
    def webhook_key(self) -> Path:
        return self.dir / "webhook.key"

    @property
    def kubelet_serving_cert(self) -> Path:
        return self.dir / "kubelet-serving.crt"

    @property
    def kubelet_serving_key(self) -> Path:
        return self.dir / "kubelet-serving.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    def client_cert(self, name: str) -> Path:
        return self.dir / f"{name}.crt"

    def client_key(self, name: str) -> Path:
        return self.dir / f"{name}.key"


def _now() -> dt.datetime:
    # Backdate a little so a freshly issued cert is valid despite clock skew
    # between the moment of signing and the apiserver's check.
    return dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)


def _name(common_name: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _new_key() -> ec.EllipticCurvePrivateKey:
    # P-256 keys are generated instantly, unlike RSA, and Go's TLS accepts them.
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: PrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.write_bytes(data)
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _make_ca() -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _new_key()
    name = _name("disagg-e2e-ca")
    start = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _issue(
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName] | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_cert, ca_key = ca
    key = _new_key()
    start = _now()
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _apiserver_sans() -> list[x509.GeneralName]:
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in APISERVER_DNS_NAMES]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in APISERVER_IPS]
    return sans


def _write_sa_keys(pki: Pki) -> None:
    # RSA because every token consumer (kopf, kr8s, client-go) verifies RS256.
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(pki.sa_key, key)
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    pki.sa_pub.write_bytes(pub)


def generate(directory: Path) -> Pki:
    """Create a fresh CA, serving cert, client certs and SA keys in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory)
    ca = _make_ca()
    _write_cert(pki.ca_cert, ca[0])
    _write_key(pki.ca_key, ca[1])

    cert, key = _issue(ca, _name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, _apiserver_sans())
    _write_cert(pki.apiserver_cert, cert)
    _write_key(pki.apiserver_key, key)

    # For webhooks served by local processes: the apiserver calls them through
    # a clientConfig.url on loopback, verified against the same CA.
    loopback = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    cert, key = _issue(ca, _name("loopback-webhook"), ExtendedKeyUsageOID.SERVER_AUTH, loopback)
    _write_cert(pki.webhook_cert, cert)
    _write_key(pki.webhook_key, key)

    node = [x509.IPAddress(ipaddress.ip_address(NODE_IP)), x509.DNSName(REAL_NODE_NAME)]
    cert, key = _issue(ca, _name(REAL_NODE_NAME), ExtendedKeyUsageOID.SERVER_AUTH, node)
    _write_cert(pki.kubelet_serving_cert, cert)
    _write_key(pki.kubelet_serving_key, key)

    for stem, (user, groups) in CLIENTS.items():
        cert, key = _issue(ca, _name(user, groups), ExtendedKeyUsageOID.CLIENT_AUTH)
        _write_cert(pki.client_cert(stem), cert)
        _write_key(pki.client_key(stem), key)

    _write_sa_keys(pki)
    return pki
