import Foundation
@testable import Vaka

extension EventBudget {
    /// The budget applied to a hand-made event JSON object, read the way a stored event is read back for a
    /// 413 retry: decoded as an ``Event``. Throws when the object is not an event.
    func fit(json object: [String: JSONValue]) throws -> Outcome {
        fit(try JSONDecoder().decode(Event.self, from: JSONEncoder().encode(object)))
    }
}
