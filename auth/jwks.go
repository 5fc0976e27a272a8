package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
)

// keyKind is the family of algorithms a key can verify.
type keyKind uint8

const (
	kindRSA keyKind = iota + 1
	kindEC256
	kindEC384
	kindEC521
	kindEd25519
)

// verifyKey is one usable public key.
type verifyKey struct {
	kid  string
	alg  string // the JWK's "alg", empty when the JWK does not pin one
	kind keyKind
	key  any // *rsa.PublicKey, *ecdsa.PublicKey or ed25519.PublicKey
}

// keySet is an immutable snapshot of a parsed JWKS.
type keySet struct {
	byKID map[string][]verifyKey
	all   []verifyKey
	// symmetric counts the "oct" keys the document held, all refused.
	symmetric int
}

// jwk is the JSON shape of one key (RFC 7517/7518/8037), only the members
// Herald reads.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
	K   string `json:"k"`
}

// parseJWKS parses a JWK Set document. Keys that cannot be used (unknown
// type, symmetric "oct" keys, "use" other than "sig", RSA under 2048 bits,
// malformed members) are
// skipped and reported in skipped; a document that is not a JWK Set at all
// is an error.
func parseJWKS(data []byte) (ks *keySet, skipped []string, err error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, nil, fmt.Errorf("auth: jwks: not a JSON object with a \"keys\" array: %w", err)
	}
	if doc.Keys == nil {
		return nil, nil, fmt.Errorf("auth: jwks: no \"keys\" array")
	}
	ks = &keySet{byKID: make(map[string][]verifyKey, len(doc.Keys))}
	for i, raw := range doc.Keys {
		var j jwk
		if err := json.Unmarshal(raw, &j); err != nil {
			skipped = append(skipped, fmt.Sprintf("key %d: not a JWK object", i))
			continue
		}
		if j.Kty == "oct" {
			ks.symmetric++
		}
		k, err := j.toKey()
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("key %d (kid %q): %v", i, trunc(j.Kid), err))
			continue
		}
		ks.all = append(ks.all, k)
		if k.kid != "" {
			ks.byKID[k.kid] = append(ks.byKID[k.kid], k)
		}
	}
	return ks, skipped, nil
}

func (j *jwk) toKey() (verifyKey, error) {
	if j.Use != "" && j.Use != "sig" {
		return verifyKey{}, fmt.Errorf("use %q is not \"sig\"", trunc(j.Use))
	}
	k := verifyKey{kid: j.Kid, alg: j.Alg}
	switch j.Kty {
	case "oct":
		// A shared secret in a key set lets whoever can read the set mint
		// tokens: refused, whatever the set's source.
		return verifyKey{}, fmt.Errorf("symmetric (oct) keys are not accepted from a key set: anyone who can read the set could mint tokens; give an HMAC secret with --jwt-hmac-secret instead")
	case "RSA":
		n, e, err := b64Pair(j.N, "n", j.E, "e")
		if err != nil {
			return verifyKey{}, err
		}
		if len(e) == 0 || len(e) > 4 {
			return verifyKey{}, fmt.Errorf("RSA exponent must be 1 to 4 bytes")
		}
		eb := new(big.Int).SetBytes(e)
		if eb.Int64() < 3 || eb.Bit(0) == 0 {
			return verifyKey{}, fmt.Errorf("RSA exponent must be odd and at least 3")
		}
		nb := new(big.Int).SetBytes(n)
		if nb.BitLen() < minRSABits {
			return verifyKey{}, fmt.Errorf("RSA modulus of %d bits is under %d", nb.BitLen(), minRSABits)
		}
		k.kind, k.key = kindRSA, &rsa.PublicKey{N: nb, E: int(eb.Int64())}
	case "EC":
		var curve elliptic.Curve
		switch j.Crv {
		case "P-256":
			curve, k.kind = elliptic.P256(), kindEC256
		case "P-384":
			curve, k.kind = elliptic.P384(), kindEC384
		case "P-521":
			curve, k.kind = elliptic.P521(), kindEC521
		default:
			return verifyKey{}, fmt.Errorf("EC curve %q is not supported", trunc(j.Crv))
		}
		x, y, err := b64Pair(j.X, "x", j.Y, "y")
		if err != nil {
			return verifyKey{}, err
		}
		size := (curve.Params().BitSize + 7) / 8
		if len(x) != size || len(y) != size {
			return verifyKey{}, fmt.Errorf("EC coordinates must be %d bytes each", size)
		}
		point := make([]byte, 0, 1+2*size)
		point = append(point, 4)
		point = append(point, x...)
		point = append(point, y...)
		pub, err := ecdsa.ParseUncompressedPublicKey(curve, point)
		if err != nil {
			return verifyKey{}, fmt.Errorf("EC point is not on the curve")
		}
		k.key = pub
	case "OKP":
		if j.Crv != "Ed25519" {
			return verifyKey{}, fmt.Errorf("OKP curve %q is not supported", trunc(j.Crv))
		}
		x, err := b64(j.X, "x")
		if err != nil {
			return verifyKey{}, err
		}
		if len(x) != ed25519.PublicKeySize {
			return verifyKey{}, fmt.Errorf("Ed25519 key must be %d bytes", ed25519.PublicKeySize)
		}
		k.kind, k.key = kindEd25519, ed25519.PublicKey(x)
	default:
		return verifyKey{}, fmt.Errorf("key type %q is not supported", trunc(j.Kty))
	}
	if k.alg != "" && !k.fits(k.alg) {
		return verifyKey{}, fmt.Errorf("alg %q does not fit the key type", trunc(k.alg))
	}
	return k, nil
}

func b64(s, member string) ([]byte, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("member %q is not unpadded base64url", member)
	}
	return b, nil
}

// b64Pair decodes two members with b64.
func b64Pair(a, memberA, b, memberB string) ([]byte, []byte, error) {
	da, err := b64(a, memberA)
	if err != nil {
		return nil, nil, err
	}
	db, err := b64(b, memberB)
	return da, db, err
}

// fits reports whether the key may verify a token signed with alg. This is
// what stops algorithm confusion: an RSA key is never handed to HMAC, an
// EC key only to its own curve's algorithm, and a JWK that pins "alg" only
// to that algorithm.
func (k verifyKey) fits(alg string) bool {
	if k.alg != "" && k.alg != alg {
		return false
	}
	switch alg {
	case "RS256", "RS384", "RS512", "PS256", "PS384", "PS512":
		return k.kind == kindRSA
	case "ES256":
		return k.kind == kindEC256
	case "ES384":
		return k.kind == kindEC384
	case "ES512":
		return k.kind == kindEC521
	case "EdDSA":
		return k.kind == kindEd25519
	}
	return false
}

// len is the number of usable keys in the set.
func (ks *keySet) len() int {
	if ks == nil {
		return 0
	}
	return len(ks.all)
}
