/**
 * Conformance table: expressions with expected results against a few request contexts. Vectors
 * marked "docs" come from the platform's Rules language reference (functions, operators, values);
 * "grammar" ones from the open-source wirefilter engine's tests; the rest exercise every operator,
 * its symbol form, precedence, `[*]`, the `edge.` alias and missing-value behaviour.
 */

import { describe, expect, it } from 'vitest';
import { buildRequestContext, compileRule } from '../../../src/edge/rules/index.ts';
import { NOW_SEC, contexts, hmacToken, inputA, type ContextName } from './contexts.ts';

type Case = [ContextName, string, boolean];

const FIELDS: Case[] = [
  ['A', 'http.host eq "www.example.com"', true],
  ['A', 'http.host == "example.com"', false],
  ['A', 'http.host ne "example.com"', true],
  ['A', 'http.host != "www.example.com"', false],
  ['A', 'http.request.method eq "GET"', true],
  ['A', 'http.request.method in {"GET" "HEAD"}', true],
  ['A', 'http.request.method in {"POST" "PUT"}', false],
  ['A', 'http.request.version eq "HTTP/2"', true],
  ['A', 'http.request.uri.path eq "/api/v1/users/42"', true],
  ['A', 'http.request.uri.query contains "filter=botm"', true],
  [
    'A',
    'http.request.uri eq "/api/v1/users/42?filter=waf&filter=botm&filter=cdn&q=a%20b&empty="',
    true,
  ],
  [
    'A',
    'http.request.full_uri eq "https://www.example.com/api/v1/users/42?filter=waf&filter=botm&filter=cdn&q=a%20b&empty="',
    true,
  ],
  ['A', 'http.request.uri.path.extension eq ""', true],
  ['A', 'ssl', true],
  ['A', 'not ssl', false],
  ['A', 'ip.src eq 203.0.113.7', true],
  ['A', 'ip.src == 203.0.113.8', false],
  ['A', 'ip.src ne 203.0.113.8', true],
  ['A', 'ip.src gt 203.0.113.6', true],
  ['A', 'ip.src lt 203.0.113.6', false],
  ['A', 'ip.src ge 203.0.113.7 and ip.src le 203.0.113.7', true],
  ['A', 'ip.src.country eq "PT"', true],
  ['A', 'ip.src.country in {"PT" "ES"}', true],
  ['A', 'ip.geoip.country eq "PT"', true],
  ['A', 'ip.src.continent eq "EU"', true],
  ['A', 'ip.src.asnum eq 13335', true],
  ['A', 'ip.src.asnum in {13335 209242}', true],
  ['A', 'ip.src.asnum in {1..13334}', false],
  ['A', 'ip.src.city eq "Lisbon"', true],
  ['A', 'ip.src.is_in_european_union', true],
  ['A', 'http.user_agent contains "Firefox"', true],
  ['A', 'http.user_agent contains "firefox"', false],
  ['A', 'http.referer eq "https://ref.example.org/page"', true],
  ['A', 'http.x_forwarded_for eq "198.51.100.1, 10.0.0.1"', true],
  ['A', 'http.cookie contains "session=abc123"', true],
  ['A', 'http.request.cookies["theme"][0] eq "dark"', true],
  ['A', 'http.request.cookies["missing"][0] eq "x"', false],
  ['A', 'http.request.headers["accept"][0] == "application/json"', true],
  ['A', 'http.request.headers["Accept"][0] == "application/json"', false],
  ['A', 'http.request.headers.names[0] == "Host"', true],
  ['A', 'http.request.headers["x-multi"][1] eq "two"', true],
  ['A', 'http.request.headers["x-multi"][2] eq "two"', false],
  ['A', 'http.request.uri.args["filter"][0] == "waf"', true],
  ['A', 'http.request.uri.args["q"][0] == "a b"', true],
  ['A', 'raw.http.request.uri.args["q"][0] == "a%20b"', true],
  ['A', 'http.request.uri.args["empty"][0] == ""', true],
  ['A', 'http.request.accepted_languages[0] == "fr-CH"', true],
  ['A', 'http.request.accepted_languages[3] == "de"', true],
  ['A', 'http.request.body.raw contains "rulesets"', true],
  ['A', 'http.request.body.size gt 100', true],
  ['A', 'http.request.body.mime eq "application/json"', true],
  ['A', `http.request.timestamp.sec eq ${NOW_SEC}`, true],
  ['A', 'http.request.timestamp.msec eq 250', true],
  ['B', 'http.host eq "shop.example.net"', true],
  [
    'B',
    'http.request.full_uri eq "http://shop.example.net:8080/a/~user/docs/Index.HTML?x=1"',
    true,
  ],
  ['B', 'http.request.uri.path eq "/a/~user/docs/Index.HTML"', true],
  ['B', 'raw.http.request.uri.path eq "/a/./b/../%7Euser//docs/Index.HTML"', true],
  ['B', 'http.request.uri.path.extension eq "html"', true],
  ['B', 'cf.edge.server_port eq 8080', true],
  ['B', 'http.request.method eq "POST"', true],
  ['B', 'http.request.version eq "HTTP/1.1"', true],
  ['B', 'not ssl', true],
  ['B', 'http.request.body.form["name"][0] eq "John Doe"', true],
  ['B', 'len(http.request.body.form["tags"]) == 2', true],
  ['B', 'http.request.body.form.names[2] == "tags"', true],
];

const CF_AND_ALIAS: Case[] = [
  ['A', 'cf.threat_score lt 10', true],
  ['A', 'cf.threat_score le 5 and cf.threat_score ge 5', true],
  ['A', 'cf.threat_score gt 5', false],
  ['A', 'cf.bot_management.score < 30', true],
  ['A', 'cf.bot_management.score >= 30', false],
  ['A', 'edge.bot_management.score == 12', true],
  ['A', 'cf.bot_management.verified_bot', false],
  ['A', 'not cf.bot_management.static_resource', true],
  ['A', 'cf.client.bot', false],
  ['A', 'cf.bot_management.ja3_hash eq "e7d705a3286e19ea42f587b344ee6865"', true],
  ['A', 'cf.tls_client_auth.cert_verified', true],
  ['A', 'edge.tls_client_auth.cert_verified and edge.tls_client_auth.cert_presented', true],
  ['A', 'edge.tls_client_auth.cert_fingerprint_sha256 eq "ab12cd34"', true],
  ['A', 'cf.api_gateway.auth_id_present', true],
  ['A', 'edge.api_gateway.auth_id_present', true],
  ['A', 'edge.api_gateway.request_violates_schema', false],
  ['A', 'edge.api_gateway.fallthrough_triggered', true],
  ['A', 'cf.api_gateway.fallthrough_detected', true],
  ['A', 'cf.zone.name eq "example.com"', true],
  ['A', 'cf.ray_id eq "8a1b2c3d4e5f6789"', true],
  ['A', 'cf.colo.name eq "LIS"', true],
  ['A', 'cf.edge.server_port eq 443', true],
  ['A', 'edge.edge.server_port in {80 443}', true],
  ['A', 'cf.edge.server_port in { 80 443 2082..2083 }', true], // grammar
  ['B', 'cf.edge.server_port in { 80 443 2082..2083 }', false], // grammar
  ['A', 'cf.sequence.msec_since_op["a1b2c3d4"] lt 2000', true],
  ['A', 'cf.tls_client_auth.cert_revoked', false],
  ['A', 'edge.api_gateway.jwt_claims_valid', false],
  [
    'A',
    'not edge.api_gateway.edge-risk-mixed-auth and not cf.api_gateway.cf-risk-missing-auth',
    true,
  ],
  ['A', 'edge.api_gateway.edge-risk-bola-enumeration', false],
  ['B', 'edge.api_gateway.edge-risk-bola-enumeration', true],
  ['B', 'cf.api_gateway.cf-risk-bola-enumeration and edge.bot_management.score gt 80', true],
  ['B', 'cf.bot_management.verified_bot', true],
  ['B', 'not cf.tls_client_auth.cert_verified', true],
];

const OPERATORS: Case[] = [
  ['A', 'http.request.uri.path matches "^/api/v[0-9]+/"', true], // docs-style
  ['A', 'http.request.uri.path ~ "^/API/"', false],
  ['A', 'http.request.uri.path matches r"(?i)^/API/"', true],
  ['A', 'http.request.uri.path matches "users/\\d+$"', true],
  ['A', 'http.request.uri.path matches r"^/api/v1/users/\\d{2}$"', true],
  ['A', 'http.user_agent matches "\\(X11; [^)]*\\)"', true],
  ['A', 'http.user_agent ~ "[\\"]"', false],
  ['A', 'http.request.full_uri wildcard "https://www.example.com/api/*"', true],
  ['A', 'http.request.full_uri wildcard "HTTPS://WWW.EXAMPLE.COM/API/*"', true],
  ['A', 'http.request.full_uri strict wildcard "HTTPS://WWW.EXAMPLE.COM/API/*"', false],
  ['A', 'http.request.full_uri strict wildcard "https://www.example.com/api/*/users/*"', true],
  ['A', 'http.request.uri.path wildcard "/api/*/users/42"', true],
  ['A', 'http.request.uri.path wildcard "/api/*/users"', false],
  ['A', 'http.request.uri.path wildcard "*"', true],
  ['A', 'http.host wildcard "*.example.com"', true],
  ['A', 'http.host wildcard "example.com"', false],
  ['A', 'http.host wildcard r"www.example.com\\*"', false],
  ['A', 'http.request.uri.path contains "/users/"', true],
  ['A', 'http.request.uri.path contains 2f:75:73:65:72:73', true], // byte string "/users"
  ['A', 'http.host eq 77:77:77:2e:65:78:61:6d:70:6c:65:2e:63:6f:6d', true],
  ['A', 'http.host >= 10:20:30:40:50:60:70:80', true], // grammar: bytes, not IPv6
  ['A', 'http.host lt "www.f"', true],
  ['A', 'http.host gt "www.example.com"', false],
  ['A', 'http.host ge "www.example.com"', true],
  ['A', 'http.host le "www.example.com"', true],
  ['A', 'cf.threat_score & 1', true],
  ['A', 'cf.threat_score bitwise_and 2', false],
  ['A', 'ip.src.asnum in {0x3417}', true],
  ['A', 'cf.threat_score == 05', true],
  ['A', 'cf.threat_score in {-5..-1}', false],
  ['A', 'http.user_agent contains r"(X11"', true],
  ['A', 'http.user_agent contains r#"Firefox/115"#', true],
  ['A', 'http.user_agent contains "\\x4d\\x6f\\x7a"', true],
  ['A', 'http.user_agent contains "\\115oz"', true],
  ['A', 'concat("a\\"b") == r#"a"b"#', true],
  ['A', 'ip.src in {203.0.113.0/24}', true],
  ['A', 'ip.src in {198.51.100.0/24 2001:db8::/32}', false],
  ['A', 'ip.src in {203.0.113.1..203.0.113.9}', true],
  ['A', 'ip.src in {203.0.113.8..203.0.113.9}', false],
  ['A', 'ip.src in { 127.0.0.0/8 ::1 10.0.0.0..10.0.255.255 }', false], // grammar
  ['B', 'ip.src in {198.51.100.1 198.51.100.3..198.51.100.7 192.0.2.0/24 2001:0db8::/32}', true], // docs
  ['B', 'ip.src in {2001:db8::/32}', true],
  ['B', 'ip.src eq 2001:db8::42', true],
  ['B', 'ip.src eq 2001:0db8:0000:0000:0000:0000:0000:0042', true],
  ['B', 'ip.src in {2001:db8::1..2001:db8::ff}', true],
  ['B', 'ip.src ne 203.0.113.7', true],
  ['B', 'ip.src lt 203.0.113.7', false],
  ['B', 'ip.src in {0.0.0.0/0}', false],
  ['B', 'ip.src in {::/0}', true],
  ['B', 'http.host in {"shop.example.net" r"x"}', true],
  ['A', 'http.host in {}', false],
  // docs (values): quoted regex strings keep regex escapes, raw strings need none
  ['A', String.raw`concat("xa\"by") matches "a\"b"`, true],
  ['A', String.raw`concat("xa\"#by") matches r##"a"#b"##`, true],
  ['A', String.raw`regex_replace(concat("a\\b"), r"\\", "a") == "aab"`, true],
  ['A', String.raw`regex_replace(concat("a\\b"), "\\\\", "a") == "aab"`, true],
  ['A', String.raw`http.request.uri.path matches r"/users/\d+$"`, true],
];

const PRECEDENCE: Case[] = [
  ['A', 'true or false and false', true],
  ['A', '(true or false) and false', false],
  ['A', 'not true and false', false],
  ['A', 'not (true and false)', true],
  ['A', 'true xor true or true', true],
  ['A', 'true xor (true or true)', false],
  ['A', 'false and false xor true', true],
  ['A', 'true and false xor true and true', true],
  ['A', 'true ^^ true', false],
  ['A', 'false || true && false', false],
  ['A', '!false && !false', true],
  ['A', 'true xor true xor true', true],
  ['A', 'not not true', true],
  ['A', 'ssl and http.host eq "www.example.com" or ip.src in {10.0.0.0/8}', true],
  ['A', 'not ssl or http.request.method eq "POST"', false],
  ['A', 'http.request.method eq "POST" or http.request.method eq "GET" and ssl', true],
  ['A', '(http.request.method eq "POST" or http.request.method eq "GET") and not ssl', false],
  ['A', 'not http.request.method eq "POST" and ssl', true],
  ['A', '!(http.host eq "www.example.com")', false],
  ['A', 'http.host eq "x" or\n  http.host eq "www.example.com"', true],
];

const ARRAYS: Case[] = [
  ['A', 'any(http.request.headers["accept"][*] == "application/json")', true], // docs
  ['A', 'any(http.request.headers["accept"][*] == "text/plain")', false], // docs
  ['A', 'any(http.request.headers.names[*] == "Content-Type")', true], // docs
  ['A', 'any(http.request.headers.names[*] == "content-type")', false],
  ['A', 'any(lower(http.request.headers.names[*])[*] == "content-type")', true], // docs
  ['A', 'all(http.request.headers["content-type"][*] == "application/json")', true], // docs
  ['A', 'all(http.request.headers["x-multi"][*] contains "o")', true],
  ['A', 'any(http.request.headers[*][*] == "one")', true],
  ['A', 'any(http.request.headers.values[*] contains "Firefox")', true],
  ['A', 'len(http.request.headers["x-multi"]) == 2', true],
  ['A', 'len(http.request.uri.args["filter"][1]) == 4', true], // docs
  ['A', 'all(len(http.request.uri.args["filter"][*])[*] in {3 4})', true], // docs
  ['A', 'all(not len(http.request.uri.args["filter"][*])[*] in {3 4})', false], // docs
  ['A', 'len(http.request.uri.args["filter"]) >= 0', true], // docs
  ['A', 'not len(http.request.uri.args["order"]) >= 0', true], // docs
  ['A', 'any(http.request.uri.args.names[*] == "q")', true],
  ['A', 'any(http.request.uri.args[*][0] == "a b")', true],
  [
    'B',
    'any(http.request.body.form.values[*] == "a" or http.request.body.form.values[*] == "b")',
    true,
  ],
  ['B', 'all(not http.request.body.form.values[*] contains "x")', true],
  [
    'B',
    'any(http.request.body.form.values[*] == "a" and http.request.body.form.names[*] == "tags")',
    true,
  ],
  [
    'B',
    'any(http.request.body.form.values[*] == "a" xor http.request.body.form.values[*] == "b")',
    true,
  ],
  ['B', 'any(url_decode(http.request.body.form.values[*])[*] contains "<script>")', true], // docs-style
];

const FUNCTIONS: Case[] = [
  ['A', 'lower(http.host) == "www.example.com"', true], // docs
  ['A', 'lower(http.user_agent) contains "firefox"', true],
  ['A', 'upper(http.host) == "WWW.EXAMPLE.COM"', true], // docs
  ['A', 'len(http.host) == 15', true],
  ['A', 'starts_with(http.request.uri.path, "/api")', true],
  ['A', 'ends_with(http.request.uri.path, "/42")', true],
  ['A', 'ends_with(http.request.uri.path, ".html")', false],
  ['A', 'concat("String1", " ", "String", "2") == "String1 String2"', true], // docs
  ['A', 'concat("/archive", http.request.uri.path) == "/archive/api/v1/users/42"', true], // docs-style
  ['A', 'len(concat(http.request.headers["x-multi"], http.request.uri.args["filter"])) == 5', true],
  ['A', 'lookup_json_string(http.request.body.raw, "company") == "cloudflare"', true], // docs
  ['A', 'lookup_json_string(http.request.body.raw, "network", "name") == "cloudflare"', true], // docs
  ['A', 'lookup_json_string(http.request.body.raw, "networks", 1) == "cloudflare"', true], // docs
  ['A', 'lookup_json_integer(http.request.body.raw, "version") == 2', true], // docs
  ['A', 'lookup_json_integer(http.request.body.raw, "network", "id") == 356', true], // docs
  ['A', 'lookup_json_integer(http.request.body.raw, "network_ids", 0) == 123', true], // docs
  ['A', 'lookup_json_integer(http.request.body.raw, "records", 1, "product_id") == 456', true], // docs
  ['A', 'lookup_json_integer(http.request.body.raw, "ratio") == 0', false],
  ['A', 'lookup_json_string(http.request.body.raw, "missing") == ""', false],
  ['A', 'url_decode("John%20Doe") == "John Doe"', true], // docs
  ['A', 'url_decode("John+Doe") == "John Doe"', true], // docs
  ['A', 'url_decode("%2520") == "%20"', true], // docs
  ['A', 'url_decode("%2520", "r") == " "', true], // docs
  ['A', 'url_decode("%u2601", "u") == "\\xe2\\x98\\x81"', true], // docs
  ['A', 'url_decode(raw.http.request.uri.query) contains "q=a b"', true],
  ['A', 'remove_bytes(http.host, "\\x2e\\x77") == "examplecom"', true], // docs-style
  ['A', 'to_string(cf.bot_management.score) == "12"', true], // docs-style
  ['A', 'to_string(ssl) == "true"', true], // docs
  ['A', 'to_string(ip.src) == "203.0.113.7"', true],
  ['A', 'regex_replace("/foo/bar", "/bar$", "/baz") == "/foo/baz"', true], // docs
  ['A', 'regex_replace("/x", "^/y$", "/mumble") == "/x"', true], // docs
  ['A', 'regex_replace("/foo", "^/FOO$", "/x") == "/foo"', true], // docs
  ['A', 'regex_replace("/a/a", "/a", "/b") == "/b/a"', true], // docs
  ['A', 'regex_replace("/b", "^/b$", "/b$$") == "/b$"', true], // docs
  [
    'A',
    'regex_replace("/foo/a/path", "^/foo/([^/]*)/(.*)$", "/bar/${2}/${1}") == "/bar/path/a"',
    true,
  ],
  [
    'B',
    'wildcard_replace(http.request.headers["x-full"][0], "https://*.example.com/*/*", "https://example.com/${1}/${2}/${3}") == "https://example.com/apps/calendar/admin?expand=true"',
    true,
  ], // docs
  [
    'B',
    'wildcard_replace(http.request.headers["x-path"][0], "/apps/*", "/${1}") == "/calendar"',
    true,
  ], // docs
  [
    'B',
    'wildcard_replace(http.request.headers["x-path"][0], "/apps/*", "/${1}", "s") == "/Apps/calendar"',
    true,
  ], // docs
  [
    'A',
    'wildcard_replace(http.request.uri.path, "/api/*/users/*", "/v=${1};id=${2}") == "/v=v1;id=42"',
    true,
  ],
  ['A', 'wildcard_replace(http.request.uri.path, "/nomatch/*", "/x") == "/api/v1/users/42"', true],
  ['A', 'substring("asdfghjk", 2, 5) == "dfg"', true], // docs
  ['A', 'substring("asdfghjk", 2) == "dfghjk"', true], // docs
  ['A', 'substring("asdfghjk", -2) == "jk"', true], // docs
  ['A', 'substring("asdfghjk", 0, -2) == "asdfgh"', true], // docs
  [
    'A',
    'uuidv4(cf.random_seed) matches "^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"',
    true,
  ],
  ['A', 'encode_base64("hello world") == "aGVsbG8gd29ybGQ="', true],
  ['A', 'encode_base64("\\xfb\\xff", "u") == "-_8"', true],
  ['A', 'any(decode_base64(http.request.headers["client_id"][*])[*] eq "123abc")', true], // docs
  ['A', 'decode_base64("not base64!") == ""', false],
  ['B', 'decode_base64(http.request.headers["x-b64"][0]) == "hello world"', true],
  ['A', 'split(http.request.headers["x-categories"][0], ",", 64)[3] == "auto"', true], // docs
  ['A', 'len(split(http.request.headers["x-categories"][0], ",", 3)) == 3', true], // docs
  ['A', 'split(http.request.headers["x-categories"][0], ",", 3)[2] == "diy,auto"', true], // docs
  ['A', 'split(http.request.headers["x-empty-cats"][0], ",", 64)[1] == ""', true], // docs
  ['A', 'join(http.request.headers["x-multi"], "+") == "one+two"', true],
  ['A', 'has_key(http.request.headers, "cookie")', true],
  ['A', 'has_key(http.request.headers, "authorization")', false],
  ['A', 'not has_key(http.request.uri.args, "order")', true],
  ['A', 'has_value(http.request.uri.args.names, "q")', true],
  ['A', 'has_value(http.request.headers["x-multi"], "three")', false],
  ['A', 'cidr(ip.src, 24, 24) == 203.0.113.0', true], // docs-style
  ['B', 'cidr(ip.src, 24, 32) == 2001:db8::', true],
  ['A', 'cidr6(ip.src, 64) == 203.0.113.7', true], // docs: IPv4 unchanged
  ['B', 'cidr6(ip.src, 48) == 2001:db8::', true],
  ['A', 'bit_slice("\\x80\\x01", 0, 1) == 1', true],
  ['A', 'bit_slice("\\x80\\x01", 8, 16) == 1', true],
  ['A', 'bit_slice("\\xab", 0, 4) == 10', true],
  ['A', 'is_jwt_valid(http.request.jwt.payload["cfg1"][0])', true],
  ['B', 'is_jwt_valid(http.request.jwt.payload["cfg1"][0])', false],
  ['A', 'lookup_json_string(http.request.jwt.payload["cfg1"][0], "sub") == "user-1"', true], // spec
  [
    'A',
    'sha256("abc") == ba:78:16:bf:8f:01:cf:ea:41:41:40:de:5d:ae:22:23:b0:03:61:a3:96:17:7a:9c:b4:10:ff:61:f2:00:15:ad',
    true,
  ],
  ['A', 'coalesce(http.request.headers["x-none"][0], "fallback") == "fallback"', true],
  ['A', 'remove_query_args(http.request.uri.query, "filter") == "q=a%20b&empty="', true],
  ['B', 'remove_query_args(http.request.uri.query, "x") == ""', true],
];

const MISSING: Case[] = [
  ['EMPTY', 'http.host eq ""', true],
  ['EMPTY', 'http.request.uri.path eq "/"', true],
  ['EMPTY', 'ssl', false],
  ['EMPTY', 'ip.src eq 0.0.0.0', true],
  ['EMPTY', 'cf.bot_management.score eq 0', true],
  ['EMPTY', 'cf.threat_score lt 1', true],
  ['EMPTY', 'edge.tls_client_auth.cert_verified', false],
  ['EMPTY', 'not edge.api_gateway.auth_id_present', true],
  ['EMPTY', 'len(http.request.headers) == 0', true],
  ['EMPTY', 'http.user_agent eq ""', true],
  ['EMPTY', 'ip.src.country eq ""', true],
  ['EMPTY', 'http.request.headers["x"][0] ne "y"', false],
  ['EMPTY', 'any(http.request.headers["x"][*] == "y")', false],
  ['EMPTY', 'all(http.request.headers["x"][*] == "y")', true],
  ['EMPTY', 'http.request.uri.args["a"][0] == ""', false],
  ['EMPTY', 'len(http.request.body.raw) == 0', true],
  ['EMPTY', 'cf.edge.server_port == 80', true],
  ['EMPTY', 'lower(http.request.headers["x"][0]) == ""', false],
];

const TABLE: Array<[string, Case[]]> = [
  ['fields', FIELDS],
  ['cf fields and the edge. alias', CF_AND_ALIAS],
  ['operators', OPERATORS],
  ['precedence', PRECEDENCE],
  ['arrays, maps and [*]', ARRAYS],
  ['functions', FUNCTIONS],
  ['missing fields and values', MISSING],
];

describe('rules conformance table', () => {
  it('has at least 150 vectors', () => {
    expect(TABLE.reduce((n, [, cases]) => n + cases.length, 0)).toBeGreaterThanOrEqual(150);
  });

  for (const [group, cases] of TABLE) {
    describe(group, () => {
      for (const [ctxName, expr, expected] of cases) {
        it(`[${ctxName}] ${expr.replace(/\n\s*/g, ' ')} → ${expected}`, () => {
          const rule = compileRule(expr);
          expect(rule(contexts[ctxName]())).toBe(expected);
        });
      }
    });
  }
});

describe('timed HMAC validation', () => {
  const now = NOW_SEC;
  const check = (token: string, extra = '') => {
    const ctx = buildRequestContext({ ...inputA, headers: [['x-token', token]] });
    return compileRule(
      `is_timed_hmac_valid_v0("mysecretkey", http.request.headers["x-token"][0], 100000, http.request.timestamp.sec, 8${extra})`,
    )(ctx);
  };

  it('accepts a fresh token with a URL-encoded MAC', () => {
    expect(check(hmacToken('/download/cat.jpg', '?verify=', now - 10))).toBe(true);
  });

  it('accepts the URL-safe form with the "s" flag', () => {
    expect(check(hmacToken('/download/cat.jpg', '?verify=', now - 10, true), ', "s"')).toBe(true);
  });

  it('rejects an expired token and a forged one', () => {
    expect(check(hmacToken('/download/cat.jpg', '?verify=', now - 200000))).toBe(false);
    const forged = hmacToken('/download/cat.jpg', '?verify=', now - 10).replace(
      '/cat.jpg',
      '/dog.jpg',
    );
    expect(check(forged)).toBe(false);
  });
});
