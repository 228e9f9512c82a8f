// Who may call the server: TLS on gRPC, REST and metrics (certificates made by openssl at test
// time), mutual TLS, and the bearer token, with real clients (flow::serving::Client, httplib's
// SSLClient, the flow_client binary).
#include <httplib.h>

#include <cstdlib>
#include <variant>

#include "serving/security.h"
#include "serving_test_util.h"

namespace st = serving_test;
namespace fs = std::filesystem;
using flow::serving::BearerToken;
using flow::serving::Client;
using flow::serving::ClientOptions;
using flow::serving::RpcError;

namespace {

// A CA, a server certificate it signed for 127.0.0.1 and localhost, a client certificate it
// signed, and a client certificate another CA signed (P-256 keys: quick to make).
struct Certificates {
  fs::path dir;

  explicit Certificates(const fs::path& where) : dir(where / "tls") {
    fs::create_directories(dir);
    const std::string script = "cd '" + dir.string() + R"(' && set -e
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out $1.key 2>/dev/null; }
ca() { key $1; openssl req -x509 -new -key $1.key -out $1.pem -days 2 -subj "/CN=$1" 2>/dev/null; }
signed() { key $1; openssl req -new -key $1.key -out $1.csr -subj "/CN=$1" 2>/dev/null
  printf "$3" > $1.ext
  openssl x509 -req -in $1.csr -CA $2.pem -CAkey $2.key -CAcreateserial -out $1.pem -days 2 -extfile $1.ext 2>/dev/null; }
ca ca; ca other_ca
signed server ca "subjectAltName=IP:127.0.0.1,DNS:localhost"
signed client ca "extendedKeyUsage=clientAuth"
signed stranger other_ca "extendedKeyUsage=clientAuth"
)";
    EXPECT_EQ(std::system(script.c_str()), 0) << "openssl could not make the test certificates";
  }
  std::string operator()(const std::string& name) const { return (dir / name).string(); }
};

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override { st::export_affine(repo_.version_dir("affine", 1), 2.0f); }

  void start(flow::serving::ServerOptions options) { server_ = st::start_server(repo_.root(), options); }

  flow::serving::TlsFiles server_tls(bool mutual) const {
    return {certs_("server.pem"), certs_("server.key"), mutual ? certs_("ca.pem") : ""};
  }

  std::string grpc_url() const { return "127.0.0.1:" + std::to_string(server_->grpc_port()); }

  // An inference through `options`: the first output's values, or the RPC's error code.
  std::variant<std::vector<float>, grpc::StatusCode> infer(ClientOptions options) const {
    options.timeout = std::chrono::seconds(10);
    try {
      Client client(grpc_url(), options);
      return st::fp32_values(client.infer("affine", {st::fp32_tensor("x", {1, 4}, {1, 2, 3, 4})}).at(0).data);
    } catch (const RpcError& error) {
      return error.code();
    }
  }

  std::unique_ptr<httplib::SSLClient> https(int port, bool client_certificate) const {
    auto client = client_certificate ? std::make_unique<httplib::SSLClient>("127.0.0.1", port, certs_("client.pem"), certs_("client.key"))
                                     : std::make_unique<httplib::SSLClient>("127.0.0.1", port);
    client->set_ca_cert_path(certs_("ca.pem").c_str());
    client->enable_server_certificate_verification(true);
    client->set_connection_timeout(10);
    client->set_read_timeout(10);
    return client;
  }

  static std::string infer_body() {
    return R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]})";
  }

  st::Repository repo_;
  Certificates certs_{repo_.root()};
  std::unique_ptr<flow::serving::Server> server_;
  const std::vector<float> expected_{2, 4, 6, 8};
};

TEST_F(SecurityTest, TlsServesClientsThatTrustItsCaOnEveryEndpoint) {
  flow::serving::ServerOptions options;
  options.tls = server_tls(false);
  start(options);
  ClientOptions trusting;
  trusting.tls_ca_file = certs_("ca.pem");
  EXPECT_EQ(std::get<std::vector<float>>(infer(trusting)), expected_);
  // Plain text, or a CA that did not sign the server's certificate: no connection.
  EXPECT_EQ(std::get<grpc::StatusCode>(infer({})), grpc::StatusCode::UNAVAILABLE);
  ClientOptions distrusting;
  distrusting.tls_ca_file = certs_("other_ca.pem");
  EXPECT_EQ(std::get<grpc::StatusCode>(infer(distrusting)), grpc::StatusCode::UNAVAILABLE);

  const auto rest = https(server_->http_port(), false)->Post("/v2/models/affine/infer", infer_body(), "application/json");
  ASSERT_TRUE(rest) << httplib::to_string(rest.error());
  EXPECT_EQ(rest->status, 200);
  EXPECT_NE(rest->body.find("[2.0,4.0,6.0,8.0]"), std::string::npos) << rest->body;
  const auto scrape = https(server_->metrics_port(), false)->Get("/metrics");
  ASSERT_TRUE(scrape) << httplib::to_string(scrape.error());
  EXPECT_EQ(scrape->status, 200);
  httplib::Client plain("127.0.0.1", server_->http_port());
  plain.set_read_timeout(10);
  EXPECT_FALSE(plain.Get("/v2/health/live"));
  auto other = https(server_->http_port(), false);
  other->set_ca_cert_path(certs_("other_ca.pem").c_str());
  EXPECT_FALSE(other->Get("/v2/health/live"));
}

TEST_F(SecurityTest, MutualTlsServesOnlyClientsWithACertificateItsCaSigned) {
  flow::serving::ServerOptions options;
  options.tls = server_tls(true);
  start(options);
  ClientOptions with_certificate;
  with_certificate.tls_ca_file = certs_("ca.pem");
  with_certificate.tls_cert_file = certs_("client.pem");
  with_certificate.tls_key_file = certs_("client.key");
  EXPECT_EQ(std::get<std::vector<float>>(infer(with_certificate)), expected_);
  ClientOptions without = with_certificate;
  without.tls_cert_file = without.tls_key_file = "";
  EXPECT_EQ(std::get<grpc::StatusCode>(infer(without)), grpc::StatusCode::UNAVAILABLE);
  ClientOptions stranger = with_certificate;
  stranger.tls_cert_file = certs_("stranger.pem");
  stranger.tls_key_file = certs_("stranger.key");
  EXPECT_EQ(std::get<grpc::StatusCode>(infer(stranger)), grpc::StatusCode::UNAVAILABLE);

  const auto served = https(server_->http_port(), true)->Get("/v2/health/ready");
  ASSERT_TRUE(served) << httplib::to_string(served.error());
  EXPECT_EQ(served->status, 200);
  EXPECT_FALSE(https(server_->http_port(), false)->Get("/v2/health/ready"));
}

TEST_F(SecurityTest, BearerTokenIsNeededForEverythingButHealthAndMetrics) {
  flow::serving::ServerOptions options;
  options.access.token = BearerToken("s3cret-token");
  start(options);
  ClientOptions with_token;
  with_token.token = "s3cret-token";
  EXPECT_EQ(std::get<std::vector<float>>(infer(with_token)), expected_);
  EXPECT_EQ(std::get<grpc::StatusCode>(infer({})), grpc::StatusCode::UNAUTHENTICATED);
  ClientOptions wrong;
  wrong.token = "s3cret-tokem";
  EXPECT_EQ(std::get<grpc::StatusCode>(infer(wrong)), grpc::StatusCode::UNAUTHENTICATED);
  Client anonymous(grpc_url());
  EXPECT_TRUE(anonymous.server_live());
  EXPECT_TRUE(anonymous.server_ready());
  EXPECT_THROW(anonymous.model_metadata("affine"), RpcError);
  EXPECT_THROW(anonymous.server_metadata(), RpcError);

  httplib::Client http("127.0.0.1", server_->http_port());
  const auto refused = http.Post("/v2/models/affine/infer", infer_body(), "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 401);
  EXPECT_EQ(refused->get_header_value("WWW-Authenticate"), "Bearer");
  EXPECT_EQ(http.Get("/v2/models/affine")->status, 401);
  EXPECT_EQ(http.Post("/v2/models/affine/infer", {{"Authorization", "Bearer nope"}}, infer_body(), "application/json")->status, 401);
  EXPECT_EQ(http.Post("/v2/models/affine/infer", {{"Authorization", "Bearer s3cret-token"}}, infer_body(), "application/json")->status, 200);
  EXPECT_EQ(http.Get("/v2/health/live")->status, 200);
  EXPECT_EQ(httplib::Client("127.0.0.1", server_->metrics_port()).Get("/metrics")->status, 200);
}

TEST_F(SecurityTest, ProtectedHealthNeedsTheTokenToo) {
  flow::serving::ServerOptions options;
  options.access.token = BearerToken("s3cret-token");
  options.access.protect_health = true;
  start(options);
  EXPECT_THROW(Client(grpc_url()).server_live(), RpcError);
  ClientOptions with_token;
  with_token.token = "s3cret-token";
  EXPECT_TRUE(Client(grpc_url(), with_token).server_live());
  httplib::Client http("127.0.0.1", server_->http_port());
  EXPECT_EQ(http.Get("/v2/health/live")->status, 401);
  EXPECT_EQ(http.Get("/v2/health/live", {{"Authorization", "Bearer s3cret-token"}})->status, 200);
  EXPECT_EQ(httplib::Client("127.0.0.1", server_->metrics_port()).Get("/metrics")->status, 401);
}

TEST_F(SecurityTest, FlowClientSpeaksTlsAndSendsTheToken) {
  flow::serving::ServerOptions options;
  options.tls = server_tls(true);
  options.access.token = BearerToken("s3cret-token");
  start(options);
  st::write_file(repo_.root() / "token", "s3cret-token\n");
  const std::string base = std::string(FLOW_CLIENT_PATH) + " --url " + grpc_url() + " --tls-ca " + certs_("ca.pem") +
                           " --tls-cert " + certs_("client.pem") + " --tls-key " + certs_("client.key");
  const std::string infer = " infer --model affine --input x=1,2,3,4 > /dev/null 2>&1";
  EXPECT_EQ(std::system((base + " --token-file " + (repo_.root() / "token").string() + infer).c_str()), 0);
  EXPECT_NE(std::system((base + infer).c_str()), 0);
}

TEST(BearerTokenTest, ComparesTheWholeTokenAfterTheBearerScheme) {
  const BearerToken token("abc");
  EXPECT_TRUE(token.accepts("Bearer abc"));
  EXPECT_TRUE(token.accepts("bearer abc "));
  EXPECT_FALSE(token.accepts("Bearer abcd"));
  EXPECT_FALSE(token.accepts("Bearer ab"));
  EXPECT_FALSE(token.accepts("Basic abc"));
  EXPECT_FALSE(token.accepts("abc"));
  EXPECT_FALSE(token.accepts(""));
  EXPECT_THROW(BearerToken(""), flow::Error);
}

TEST(BearerTokenTest, FileHoldsTheTokenOnItsFirstLine) {
  st::Repository repo;
  st::write_file(repo.root() / "token", "  abc \nignored\n");
  EXPECT_TRUE(BearerToken::from_file((repo.root() / "token").string()).accepts("Bearer abc"));
  st::write_file(repo.root() / "empty", "\n");
  EXPECT_THROW(BearerToken::from_file((repo.root() / "empty").string()), flow::Error);
  EXPECT_THROW(BearerToken::from_file((repo.root() / "missing").string()), flow::Error);
}

TEST(TlsFilesTest, IncompleteOrMissingFilesAreRefusedAtStart) {
  st::Repository repo;
  EXPECT_THROW((flow::serving::TlsFiles{"cert.pem", "", ""}.check()), flow::Error);
  EXPECT_THROW((flow::serving::TlsFiles{"", "", "ca.pem"}.check()), flow::Error);
  EXPECT_THROW((flow::serving::TlsFiles{(repo.root() / "missing.pem").string(), (repo.root() / "missing.key").string(), ""}.check()),
               flow::Error);
}

}  // namespace
