import Foundation
import XCTest
import Vaka

/// An event decoded from JSON that has every field of the protocol types, unknown keys at every level and values
/// of the wrong type encodes to exactly these bytes (key order, numbers, the unknown keys kept verbatim, the
/// frame field `trust` only in the report encoding), as recorded from the encoder that read and wrote fields
/// through key paths.
final class EventBytesTests: XCTestCase {
    static let input = #"""
{"zzz":1,"event_id":"","timestamp":"2026-01-01T00:00:00Z","platform":7,"level":"fatal","sdk":{"name":"x","version":"1","packages":[{"name":"a","version":"b"}],"integrations":["i"],"extra_sdk":true},
"release":null,"environment":"e","logentry":{"formatted":"m","params":[1]},"user":{"id":"u","email":5,"username":"n","ip_address":"1.2.3.4","geo":{}},
"tags":{"a":"b"},"extra":{"k":[1,{"x":null}]},"breadcrumbs":{"values":[{"message":"b","weird":1}]},
"contexts":{"os":{"name":"Linux","version":"6","kernel_version":"k","build":"b","distribution_name":"d","distribution_version":"1","distribution_pretty_name":"D 1","more":1},"device":{"arch":"x86_64","x":2},"app":{"app_name":"a","app_version":"1","app_start_time":"t","app_identifier":"i","y":3},"custom":{"z":1}},
"exception":{"values":[{"type":"SIGSEGV","value":"v","thread_id":3,"mechanism":{"type":"signalhandler","handled":false,"meta":{"signal":{"number":11,"code":1,"name":"SIGSEGV","code_name":"SEGV_MAPERR"},"ns_error":{"code":1,"domain":"d"},"other":1},"data":{"a":"b"},"source":"s","q":1},
  "stacktrace":{"frames":[{"trust":"context","package":"p","image_addr":"0x1000","function":"f","symbol":"s","symbol_addr":"0x1010","in_app":true,"filename":"a.c","lineno":3,"colno":4,"abs_path":"/a.c","instruction_addr":"0x1020","vars":{}}],"registers":{"rip":"0x1"},"zz":1},"extra":1}],"more":2},
"threads":{"values":[{"id":1,"name":"main","crashed":true,"current":"yes","stacktrace":{"frames":[]},"state":"x","r":1}]},
"debug_meta":{"images":[{"type":"elf","code_file":"/a","image_addr":"0x1000","image_size":4096,"code_id":"ab","debug_id":"cd","arch":"x86_64","w":1}],"sdk_info":{}},
"dist":"d","server_name":"s","type":"error","fingerprint":["a","b"],"transaction":"t"}
"""#

    static let wire = #"{"breadcrumbs":{"values":[{"message":"b","weird":1}]},"contexts":{"app":{"app_identifier":"i","app_name":"a","app_start_time":"t","app_version":"1","y":3},"custom":{"z":1},"device":{"arch":"x86_64","x":2},"os":{"build":"b","distribution_name":"d","distribution_pretty_name":"D 1","distribution_version":"1","kernel_version":"k","more":1,"name":"Linux","version":"6"}},"debug_meta":{"images":[{"arch":"x86_64","code_file":"/a","code_id":"ab","debug_id":"cd","image_addr":"0x1000","image_size":4096,"type":"elf","w":1}],"sdk_info":{}},"dist":"d","environment":"e","exception":{"values":[{"extra":1,"mechanism":{"data":{"a":"b"},"handled":false,"meta":{"ns_error":{"code":1,"domain":"d"},"other":1,"signal":{"code":1,"code_name":"SEGV_MAPERR","name":"SIGSEGV","number":11}},"q":1,"source":"s","type":"signalhandler"},"stacktrace":{"frames":[{"abs_path":"/a.c","colno":4,"filename":"a.c","function":"f","image_addr":"0x1000","in_app":true,"instruction_addr":"0x1020","lineno":3,"package":"p","symbol":"s","symbol_addr":"0x1010","vars":{}}],"registers":{"rip":"0x1"},"zz":1},"thread_id":3,"type":"SIGSEGV","value":"v"}]},"extra":{"k":[1,{"x":null}]},"fingerprint":["a","b"],"level":"fatal","logentry":{"formatted":"m","params":[1]},"platform":7,"release":null,"sdk":{"extra_sdk":true,"integrations":["i"],"name":"x","packages":[{"name":"a","version":"b"}],"version":"1"},"server_name":"s","tags":{"a":"b"},"threads":{"values":[{"crashed":true,"current":"yes","id":1,"name":"main","r":1,"stacktrace":{"frames":[]},"state":"x"}]},"timestamp":"2026-01-01T00:00:00Z","transaction":"t","type":"error","user":{"email":5,"geo":{},"id":"u","ip_address":"1.2.3.4","username":"n"},"zzz":1}"#

    static let report = #"{"breadcrumbs":{"values":[{"message":"b","weird":1}]},"contexts":{"app":{"app_identifier":"i","app_name":"a","app_start_time":"t","app_version":"1","y":3},"custom":{"z":1},"device":{"arch":"x86_64","x":2},"os":{"build":"b","distribution_name":"d","distribution_pretty_name":"D 1","distribution_version":"1","kernel_version":"k","more":1,"name":"Linux","version":"6"}},"debug_meta":{"images":[{"arch":"x86_64","code_file":"/a","code_id":"ab","debug_id":"cd","image_addr":"0x1000","image_size":4096,"type":"elf","w":1}],"sdk_info":{}},"dist":"d","environment":"e","exception":{"values":[{"extra":1,"mechanism":{"data":{"a":"b"},"handled":false,"meta":{"ns_error":{"code":1,"domain":"d"},"other":1,"signal":{"code":1,"code_name":"SEGV_MAPERR","name":"SIGSEGV","number":11}},"q":1,"source":"s","type":"signalhandler"},"stacktrace":{"frames":[{"abs_path":"/a.c","colno":4,"filename":"a.c","function":"f","image_addr":"0x1000","in_app":true,"instruction_addr":"0x1020","lineno":3,"package":"p","symbol":"s","symbol_addr":"0x1010","trust":"context","vars":{}}],"registers":{"rip":"0x1"},"zz":1},"thread_id":3,"type":"SIGSEGV","value":"v"}]},"extra":{"k":[1,{"x":null}]},"fingerprint":["a","b"],"level":"fatal","logentry":{"formatted":"m","params":[1]},"platform":7,"release":null,"sdk":{"extra_sdk":true,"integrations":["i"],"name":"x","packages":[{"name":"a","version":"b"}],"version":"1"},"server_name":"s","tags":{"a":"b"},"threads":{"values":[{"crashed":true,"current":"yes","id":1,"name":"main","r":1,"stacktrace":{"frames":[]},"state":"x"}]},"timestamp":"2026-01-01T00:00:00Z","transaction":"t","type":"error","user":{"email":5,"geo":{},"id":"u","ip_address":"1.2.3.4","username":"n"},"zzz":1}"#

    func testAnEventWithEveryFieldAndUnknownKeysEncodesToTheRecordedBytes() throws {
        let event = try JSONDecoder().decode(Event.self, from: Data(EventBytesTests.input.utf8))
        XCTAssertEqual(String(decoding: try event.jsonData(encoding: .wire), as: UTF8.self), EventBytesTests.wire)
        XCTAssertEqual(String(decoding: try event.jsonData(encoding: .report), as: UTF8.self), EventBytesTests.report)
        // Read back, the event encodes to the same bytes again.
        let again = try JSONDecoder().decode(Event.self, from: try event.jsonData(encoding: .report))
        XCTAssertEqual(String(decoding: try again.jsonData(encoding: .report), as: UTF8.self), EventBytesTests.report)
    }
}
