import Foundation

// The JSON coding of what every run writes on its start and exit path: `scope.json` (``RunScope`` with its
// ``SessionState``) and the session update (``SessionUpdate``). Each member is coded under its name through
// the one coding-key type ``OtherFieldKey`` instead of a synthesized `CodingKeys` enum per type: the Swift
// runtime looks up the conformance of every coding-key type the first time a process encodes with it (a scan
// of every loaded library's conformance records, about a tenth of a millisecond each), which every run paid
// once per type. The member names, optionality and JSON are those the synthesized coding gave, so files
// written before read the same. `StartPathCodingTests` checks that every stored property is written and read
// back, so a property added to one of these types without a line here fails a test instead of being left
// out of the file.

extension RunScope {
    init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: OtherFieldKey.self)
        runID = try c.decode(String.self, forKey: OtherFieldKey("runID"))
        release = try c.decode(String.self, forKey: OtherFieldKey("release"))
        environment = try c.decode(String.self, forKey: OtherFieldKey("environment"))
        tags = try c.decode([String: String].self, forKey: OtherFieldKey("tags"))
        userID = try c.decodeIfPresent(String.self, forKey: OtherFieldKey("userID"))
        session = try c.decodeIfPresent(SessionState.self, forKey: OtherFieldKey("session"))
        userEmail = try c.decodeIfPresent(String.self, forKey: OtherFieldKey("userEmail"))
        username = try c.decodeIfPresent(String.self, forKey: OtherFieldKey("username"))
        userIPAddress = try c.decodeIfPresent(String.self, forKey: OtherFieldKey("userIPAddress"))
        contexts = try c.decodeIfPresent([String: [String: JSONValue]].self, forKey: OtherFieldKey("contexts"))
        extra = try c.decodeIfPresent([String: JSONValue].self, forKey: OtherFieldKey("extra"))
        attachments = try c.decodeIfPresent([AttachmentRef].self, forKey: OtherFieldKey("attachments"))
    }

    func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: OtherFieldKey.self)
        try c.encode(runID, forKey: OtherFieldKey("runID"))
        try c.encode(release, forKey: OtherFieldKey("release"))
        try c.encode(environment, forKey: OtherFieldKey("environment"))
        try c.encode(tags, forKey: OtherFieldKey("tags"))
        try c.encodeIfPresent(userID, forKey: OtherFieldKey("userID"))
        try c.encodeIfPresent(session, forKey: OtherFieldKey("session"))
        try c.encodeIfPresent(userEmail, forKey: OtherFieldKey("userEmail"))
        try c.encodeIfPresent(username, forKey: OtherFieldKey("username"))
        try c.encodeIfPresent(userIPAddress, forKey: OtherFieldKey("userIPAddress"))
        // Members most runs leave out are tested here, not by `encodeIfPresent`: its generic call would make the
        // runtime instantiate the optional's type metadata (by mangled name) even for `nil`.
        if let contexts { try c.encode(contexts, forKey: OtherFieldKey("contexts")) }
        if let extra { try c.encode(extra, forKey: OtherFieldKey("extra")) }
        if let attachments { try c.encode(attachments, forKey: OtherFieldKey("attachments")) }
    }
}

extension SessionState {
    init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: OtherFieldKey.self)
        sid = try c.decode(String.self, forKey: OtherFieldKey("sid"))
        did = try c.decodeIfPresent(String.self, forKey: OtherFieldKey("did"))
        started = try c.decode(Double.self, forKey: OtherFieldKey("started"))
        errors = try c.decode(Int.self, forKey: OtherFieldKey("errors"))
        status = try c.decode(SessionUpdate.Status.self, forKey: OtherFieldKey("status"))
        initSent = try c.decode(Bool.self, forKey: OtherFieldKey("initSent"))
    }

    func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: OtherFieldKey.self)
        try c.encode(sid, forKey: OtherFieldKey("sid"))
        try c.encodeIfPresent(did, forKey: OtherFieldKey("did"))
        try c.encode(started, forKey: OtherFieldKey("started"))
        try c.encode(errors, forKey: OtherFieldKey("errors"))
        try c.encode(status, forKey: OtherFieldKey("status"))
        try c.encode(initSent, forKey: OtherFieldKey("initSent"))
    }
}

extension SessionUpdate {
    init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: OtherFieldKey.self)
        sid = try c.decode(String.self, forKey: OtherFieldKey("sid"))
        did = try c.decodeIfPresent(String.self, forKey: OtherFieldKey("did"))
        seq = try c.decode(Int64.self, forKey: OtherFieldKey("seq"))
        `init` = try c.decode(Bool.self, forKey: OtherFieldKey("init"))
        started = try c.decode(String.self, forKey: OtherFieldKey("started"))
        timestamp = try c.decode(String.self, forKey: OtherFieldKey("timestamp"))
        duration = try c.decodeIfPresent(Double.self, forKey: OtherFieldKey("duration"))
        status = try c.decode(Status.self, forKey: OtherFieldKey("status"))
        errors = try c.decode(Int.self, forKey: OtherFieldKey("errors"))
        attrs = try c.decode(Attributes.self, forKey: OtherFieldKey("attrs"))
    }

    func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: OtherFieldKey.self)
        try c.encode(sid, forKey: OtherFieldKey("sid"))
        try c.encodeIfPresent(did, forKey: OtherFieldKey("did"))
        try c.encode(seq, forKey: OtherFieldKey("seq"))
        try c.encode(`init`, forKey: OtherFieldKey("init"))
        try c.encode(started, forKey: OtherFieldKey("started"))
        try c.encode(timestamp, forKey: OtherFieldKey("timestamp"))
        try c.encodeIfPresent(duration, forKey: OtherFieldKey("duration"))
        try c.encode(status, forKey: OtherFieldKey("status"))
        try c.encode(errors, forKey: OtherFieldKey("errors"))
        try c.encode(attrs, forKey: OtherFieldKey("attrs"))
    }
}

extension SessionUpdate.Attributes {
    init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: OtherFieldKey.self)
        release = try c.decode(String.self, forKey: OtherFieldKey("release"))
        environment = try c.decodeIfPresent(String.self, forKey: OtherFieldKey("environment"))
    }

    func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: OtherFieldKey.self)
        try c.encode(release, forKey: OtherFieldKey("release"))
        try c.encodeIfPresent(environment, forKey: OtherFieldKey("environment"))
    }
}
