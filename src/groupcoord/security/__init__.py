"""Security: who a connection is and what it may do (issue 20).

Modules (none is imported here, so each stays importable on its own):
  scram      SCRAM-SHA-256/512 (RFC 5802/7677) and PLAIN server mechanisms, credentials
  sasl       per-connection SASL state machine (SaslHandshake / SaslAuthenticate, KIP-368)
  principal  Kafka principals; an SSL client certificate's subject -> "User:<RFC 2253 DN>"
  acl        ACL model, filters and the Authorizer (Kafka's rules, cached)
  records    credential and ACL records, SecurityState (replay)
  store      SecurityStore: file log or PostgreSQL
  admin      planners for DescribeAcls/CreateAcls/DeleteAcls and the SCRAM credential APIs
  users_cli  `groupcoord users set|delete|list`
"""
