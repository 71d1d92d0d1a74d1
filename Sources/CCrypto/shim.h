#ifndef JOTTER_CCRYPTO_SHIM_H
#define JOTTER_CCRYPTO_SHIM_H

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/pem.h>
#include <openssl/bio.h>
#include <openssl/ec.h>

/// A fresh ECDSA P-256 key (EVP_EC_gen is a macro over a variadic call).
static inline EVP_PKEY *jotter_ec_p256_key(void) {
    return EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
}

/// Adds an X.509 v3 extension given in OpenSSL's config syntax ("DNS:localhost,IP:127.0.0.1").
/// `issuer` is what `authorityKeyIdentifier` is taken from (the certificate itself when self-signed).
static inline int jotter_x509_add_extension(X509 *certificate, X509 *issuer, int nid, const char *value) {
    X509V3_CTX context;
    X509V3_set_ctx_nodb(&context);
    X509V3_set_ctx(&context, issuer, certificate, NULL, NULL, 0);
    X509_EXTENSION *extension = X509V3_EXT_conf_nid(NULL, &context, nid, value);
    if (extension == NULL) return 0;
    int ok = X509_add_ext(certificate, extension, -1);
    X509_EXTENSION_free(extension);
    return ok;
}

/// The bytes held by a memory BIO (BIO_get_mem_data is a macro).
static inline long jotter_bio_contents(BIO *bio, char **data) {
    return BIO_get_mem_data(bio, data);
}

#endif
