extension RandomAccessCollection where Index == Int {
    /// The index of the first element whose `key` is greater than `value`, in a collection sorted by `key`
    /// ascending (`count` when there is none). The element before it, if any, is the last one with
    /// `key <= value`: the candidate range containing `value`.
    func firstIndex<Key: Comparable>(after value: Key, by key: (Element) -> Key) -> Int {
        var low = startIndex
        var high = endIndex
        while low < high {
            let mid = (low + high) / 2
            if key(self[mid]) <= value { low = mid + 1 } else { high = mid }
        }
        return low
    }

    /// The index of the first element whose `key` is at least `value`, in a collection sorted by `key` ascending
    /// (`count` when there is none): where the elements from `value` up begin.
    func firstIndex<Key: Comparable>(notBelow value: Key, by key: (Element) -> Key) -> Int {
        var low = startIndex
        var high = endIndex
        while low < high {
            let mid = (low + high) / 2
            if key(self[mid]) < value { low = mid + 1 } else { high = mid }
        }
        return low
    }
}
