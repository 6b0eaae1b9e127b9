// A helper for writing scenarios: ORDO_DIFF_FILE=path runs a scenario file
// (its expectations ignored) through the model, prints it with the model's
// expectations written in, and fails if the bus disagrees with them.
//
//   ORDO_DIFF_FILE=/tmp/s.json swift test --filter checkFile

import Foundation
import Testing

@Test("a scenario file from ORDO_DIFF_FILE agrees with the model")
func checkFile() throws {
  guard let path = ProcessInfo.processInfo.environment["ORDO_DIFF_FILE"] else { return }
  let data = try Data(contentsOf: URL(fileURLWithPath: path))
  let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
  var steps = try #require(object["steps"] as? [Any]).map(Differential.parse)
  for i in steps.indices { steps[i].clearExpectations() }
  let annotated = try Model.annotate(steps)
  print(JSONText.scenario(name: object["name"] as? String ?? "file", about: object["about"] as? String ?? "", steps: annotated))
  let difference = Differential.disagreement(annotated: annotated, name: path)
  #expect(difference == nil, "\(difference ?? "")")
}
